-- 17: whether the workers verified a definition's row against its
-- statement (verify.go, D21). Rows of earlier formats are verified
-- again: a row crafted before this format must not stay trusted.

ALTER TABLE {{S}}._definitions ADD COLUMN verified boolean NOT NULL DEFAULT false;