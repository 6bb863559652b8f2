-- 6: capture writes one log row per statement and table, its changed
-- keys in an array (B2: a row and two index entries per changed row
-- cost the writer about three times its own write). key stays for
-- single-key rows (rederive) and markers. A big array is compressed
-- and kept out of line (TOAST): ~4 KB of WAL for 1,000 bigint keys.


ALTER TABLE {{S}}._change_log ADD COLUMN keys text[];
