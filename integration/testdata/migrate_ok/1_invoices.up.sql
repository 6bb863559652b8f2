-- golang-migrate sends this file as one string: one implicit transaction.
CREATE TABLE invoices (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric NOT NULL);
INSERT INTO invoices VALUES (1, 'acme', 10), (2, 'acme', 5), (3, 'globex', 7);
TRANSFORM invoice_totals FROM invoices GROUP BY customer
  SELECT SUM(amount) AS total, COUNT(*) AS n;
