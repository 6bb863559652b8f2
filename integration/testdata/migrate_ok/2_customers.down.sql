PAUSE TRANSFORM revenue_by_region;
DROP TRANSFORM revenue_by_region;
DROP TABLE customers;
