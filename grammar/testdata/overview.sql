-- The ten representative statements of grammar spec §1 (schema of §1).
-- Same format as examples.sql.

-- expect: ok
-- 1. A 1-1 transform: one row per order, keyed by orders.id.
TRANSFORM order_view FROM orders
SELECT customer_id AS customer_id,
       amount + tax AS gross,
       CASE WHEN status = 'shipped' THEN 1 ELSE 0 END AS shipped,
       round(amount * 0.92, 2) AS amount_eur;
-- expect: ok
TRANSFORM region_totals FROM orders GROUP BY region
SELECT region AS region, SUM(amount) AS total, COUNT(*) AS n,
       AVG(amount) AS avg_amount, MAX(placed_at) AS last_order;
-- expect: ok
TRANSFORM order_summary FROM orders o
  LEFT JOIN customers c ON c.id = o.customer_id
  LEFT JOIN regions r ON r.id = c.region_id
SELECT c.name AS customer_name, r.name AS region_name, o.amount * (1 - c.discount) AS net;
-- expect: ok
TRANSFORM lines_per_order FROM order_items i JOIN orders o ON o.id = i.order_id
GROUP BY o.id
SELECT COUNT(i.id) AS lines, SUM(i.qty) AS units;
-- expect: ok
TRANSFORM revenue_by_tier FROM orders JOIN customers ON customers.id = orders.customer_id
GROUP BY customers.tier
SELECT SUM(amount) AS revenue, COUNT(*) AS order_count;
-- expect: ok
TRANSFORM refund_view FROM refunds
SELECT order_id AS order_id, -amount AS signed_amount;
-- expect: ok
TRANSFORM refunds_per_order FROM refund_view GROUP BY order_id
SELECT SUM(signed_amount) AS refunded;
-- expect: ok
ALTER TRANSFORM order_view ADD qty * 2 AS double_qty, ALTER gross AS amount + tax + 1,
                           DROP amount_eur;
-- expect: ok
PAUSE TRANSFORM order_view.gross;
-- expect: ok
RESUME TRANSFORM order_view.gross;
-- expect: ok
PAUSE TRANSFORM order_summary;
-- expect: ok
DROP TRANSFORM order_summary;
-- expect: RelationshipsReplacedByJoin 0A000
DROP RELATIONSHIP orders.items;
