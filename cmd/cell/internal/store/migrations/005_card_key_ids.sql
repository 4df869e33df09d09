-- Each row names the keys its card data was computed under (issue #18):
-- pan_hash_key_id for pan_hash (per-card velocity checks), and
-- fingerprint_key_id for fingerprint (replays). Both keys are derived from
-- the cell's master secret with HKDF, and a key ID is a short identifier
-- derived from the key (internal/cardkeys), never key material. Keys rotate:
-- velocity counts a card's rows under every key of the cell's key ring, and
-- a replay is compared under the key its record names.
--
-- Rows written before this migration were computed with the master secret
-- itself, before derivation: they name the key ID 'legacy', which the key
-- ring resolves to its oldest master used as it is. The default applies to
-- those rows only; every new row names its keys.
ALTER TABLE transactions
    ADD COLUMN pan_hash_key_id    text NOT NULL DEFAULT 'legacy',
    ADD COLUMN fingerprint_key_id text NOT NULL DEFAULT 'legacy';
ALTER TABLE transactions
    ALTER COLUMN pan_hash_key_id DROP DEFAULT,
    ALTER COLUMN fingerprint_key_id DROP DEFAULT;

---- create above / drop below ----

ALTER TABLE transactions
    DROP COLUMN fingerprint_key_id,
    DROP COLUMN pan_hash_key_id;
