-- A PAN shorter than 16 digits shows fewer than its first 6 and last 4
-- (issue #18; internal/card.Mask): n-6 digits at most, so that at least 6
-- are hidden whatever the length. The CHECK accepts exactly Mask's shape
-- for each length the API accepts (12 to 19 digits), and nothing that
-- shows more.
--
--   length  12  13  14  15  16..19
--   first    4   5   6   6   6
--   last     2   2   2   3   4
--
-- Rows masked before this migration under the old rule (first 6, last 4
-- for every length) are masked again: hiding more is possible from the
-- masked value alone (with the old CHECK dropped first: it refuses the
-- new shapes).
ALTER TABLE transactions DROP CONSTRAINT transactions_masked_pan_check;

UPDATE transactions SET masked_pan = CASE length(masked_pan)
        WHEN 12 THEN left(masked_pan, 4) || '******' || right(masked_pan, 2)
        WHEN 13 THEN left(masked_pan, 5) || '******' || right(masked_pan, 2)
        WHEN 14 THEN left(masked_pan, 6) || '******' || right(masked_pan, 2)
        WHEN 15 THEN left(masked_pan, 6) || '******' || right(masked_pan, 3)
    END
    WHERE length(masked_pan) BETWEEN 12 AND 15;

ALTER TABLE transactions
    ADD CONSTRAINT transactions_masked_pan_check CHECK (
        masked_pan = ''
        OR masked_pan ~ '^[0-9]{4}[*]{6}[0-9]{2}$'
        OR masked_pan ~ '^[0-9]{5}[*]{6}[0-9]{2}$'
        OR masked_pan ~ '^[0-9]{6}[*]{6}[0-9]{2,3}$'
        OR masked_pan ~ '^[0-9]{6}[*]{6,9}[0-9]{4}$');

---- create above / drop below ----

-- The old rule's CHECK, not validated against the rows masked under the
-- new one (their hidden digits cannot come back).
ALTER TABLE transactions
    DROP CONSTRAINT transactions_masked_pan_check,
    ADD CONSTRAINT transactions_masked_pan_check
        CHECK (masked_pan = '' OR masked_pan ~ '^[0-9]{6}[*]{2,9}[0-9]{4}$') NOT VALID;
