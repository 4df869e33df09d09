-- pgbench script: the SQL one approved card authorization runs in a cell,
-- statement for statement and commit for commit (each statement is its own
-- transaction, as in cmd/cell/internal/store). Keep in step with store.go
-- (TestPgbenchScriptRuns runs it against the schema as migrated).
\set id random(1, 1000000000000)
\set card random(1, 1000000)
INSERT INTO transactions (transaction_id, fingerprint, state, decline_reason, auth_code, payment_type, partner_id, market,
  amount, currency, settlement_amount, settlement_currency, risk_amount, merchant_id, mcc, merchant_country,
  masked_pan, pan_hash, refdata_version, route_rule, attempt, cell_id, created_at, updated_at,
  pan_hash_key_id, fingerprint_key_id)
SELECT 'pgb-' || :id, '\x0102', 'received', '', '', 1, 'p-001', 'GB', 1250, 'GBP', 1250, 'GBP', 1486, 'm-1', '5411', 'GB',
  '424242******4242', decode(md5(:card::text), 'hex'), '1', 'everything', 1, 'cell-a', now(), now(),
  'pan-00000000', 'fp-00000000'
WHERE cellpay_claim_key('p-001', 'pgb-' || :id);
SELECT count(*), coalesce(sum(risk_amount), 0)::bigint FROM transactions
  WHERE pan_hash = ANY(ARRAY[decode(md5(:card::text), 'hex')])
  AND (pan_hash_key_id, pan_hash) IN (SELECT * FROM unnest(ARRAY['pan-00000000'], ARRAY[decode(md5(:card::text), 'hex')]))
  AND created_at >= now() - interval '10 minutes'
  AND (partner_id, transaction_id) <> ('p-001', 'pgb-' || :id) AND state IN ('received', 'sending', 'approved');
UPDATE transactions SET state = 'sending', decline_reason = '', auth_code = '', updated_at = now()
  WHERE partner_id = 'p-001' AND transaction_id = 'pgb-' || :id AND state = 'received';
UPDATE transactions SET state = 'approved', decline_reason = '', auth_code = 'A1B2C3', updated_at = now()
  WHERE partner_id = 'p-001' AND transaction_id = 'pgb-' || :id AND state = 'sending';
