-- Gebühren für Zahlungen: the two ü make byte and character offsets differ.
CREATE TABLE payments (id bigint PRIMARY KEY, amount numeric NOT NULL);
TRANSFORM payment_fees FROM payments
  SELECT amount * 0.03 AS fee,
         amount * AS broken;
CREATE INDEX ON payments (amount);
