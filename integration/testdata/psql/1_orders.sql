-- A transactional migration, as dbmate, Flyway or Rails would run it.
BEGIN;
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL, price numeric NOT NULL, tax numeric NOT NULL);
INSERT INTO orders SELECT g, g % 3, g, g / 10.0 FROM generate_series(1, 30) g;
TRANSFORM order_totals FROM orders SELECT price + tax AS total;
TRANSFORM customer_spend FROM orders GROUP BY customer_id SELECT SUM(price) AS spent;
COMMIT;
