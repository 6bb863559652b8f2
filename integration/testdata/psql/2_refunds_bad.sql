BEGIN;
CREATE TABLE refunds (id bigint PRIMARY KEY, amount numeric NOT NULL);
TRANSFORM refund_totals FROM refunds
  SELECT amount + AS broken;
COMMIT;
