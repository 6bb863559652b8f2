-- A JOIN target defined in the same file as the table it joins: one
-- implicit transaction, as golang-migrate sends the file.
CREATE TABLE customers (name text PRIMARY KEY, region text NOT NULL);
INSERT INTO customers VALUES ('acme', 'north'), ('globex', 'south');
CREATE INDEX ON invoices (customer);
TRANSFORM revenue_by_region FROM invoices i JOIN customers c ON c.name = i.customer
  GROUP BY c.region SELECT SUM(i.amount) AS revenue, COUNT(*) AS n;
