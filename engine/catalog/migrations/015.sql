-- 15: an empty slot of the trust boundary (see 12).

SELECT 1;