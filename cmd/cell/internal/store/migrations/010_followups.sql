-- Captures, voids and refunds (issue #40): each is a row of its own (its
-- own partner and transaction ID, payment type CAPTURE, VOID or REFUND)
-- naming its authorization in original_transaction_id, in the same cell as
-- the authorization. The authorization's row keeps the ledger of its
-- follow-ups: the approved sums (captured, refunded, voided) and what is
-- in flight (held_capture, held_refund: a follow-up recorded and sent, its
-- outcome not known yet; a void holds the whole amount). A follow-up is
-- held under the authorization's row lock before it is sent, and settled
-- (moved from held to done, or released) in the statement that records its
-- outcome (Store.HoldFollowUp, Persist). The CHECKs are the limits
-- themselves: whatever the code does, the database never holds captures
-- beyond the authorization, refunds beyond the captures, or a capture of a
-- voided authorization (internal/followup states the same rules).
ALTER TABLE transactions
    ADD COLUMN original_transaction_id text NOT NULL DEFAULT '',
    ADD COLUMN captured bigint NOT NULL DEFAULT 0,
    ADD COLUMN refunded bigint NOT NULL DEFAULT 0,
    ADD COLUMN held_capture bigint NOT NULL DEFAULT 0,
    ADD COLUMN held_refund bigint NOT NULL DEFAULT 0,
    ADD COLUMN voided boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT transactions_followup_sums CHECK (
        captured >= 0 AND refunded >= 0 AND held_capture >= 0 AND held_refund >= 0
        AND captured + held_capture <= amount
        AND refunded + held_refund <= captured
        AND (NOT voided OR captured = 0));

-- A partner's follow-ups of one authorization, for operators and the
-- statements.
CREATE INDEX transactions_followups ON transactions (partner_id, original_transaction_id)
    WHERE original_transaction_id <> '';

-- A partner's transactions by creation time: ListTransactions' pages and
-- the daily statements read it, never the whole table.
CREATE INDEX transactions_partner_created ON transactions (partner_id, created_at, transaction_id);

---- create above / drop below ----

DROP INDEX transactions_partner_created;
DROP INDEX transactions_followups;
ALTER TABLE transactions
    DROP CONSTRAINT transactions_followup_sums,
    DROP COLUMN voided,
    DROP COLUMN held_refund,
    DROP COLUMN held_capture,
    DROP COLUMN refunded,
    DROP COLUMN captured,
    DROP COLUMN original_transaction_id;
