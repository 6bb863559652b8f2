PAUSE TRANSFORM invoice_totals;
DROP TRANSFORM invoice_totals;
DROP TABLE invoices;
