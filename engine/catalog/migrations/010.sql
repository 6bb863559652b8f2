-- 10: the log's op CHECK goes (B2 single-row write tax). PostgreSQL
-- re-reads a CHECK constraint's expression from its stored text on every
-- INSERT statement: that cost a capture trigger's one-row INSERT about
-- three quarters of what the application's own single-row INSERT costs
-- in all (54 k against 75 k instructions). Only the engine writes op,
-- from constants in its own SQL.


ALTER TABLE {{S}}._change_log DROP CONSTRAINT IF EXISTS _change_log_op_check;
