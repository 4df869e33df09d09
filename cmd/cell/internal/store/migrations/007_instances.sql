-- Several instances (processes) of a cell share its database (issue #11).
-- Each instance holds a lease in instances, renewed every couple of
-- seconds by the instance itself and compared with this database's clock
-- only (now()), so that no two pods' clocks are ever compared. A row being
-- worked on names its instance in transactions.owner; the owner is cleared
-- when the attempt ends (a final or abandoned state, or a PENDING answer).
-- "An attempt is in progress" is: the row has an owner, the owner's lease
-- is live, and the row was written recently (store.ActiveFor): see
-- docs/design/cell-instances.md.
--
-- refdata_version is the reference data version the instance serves (0: a
-- bootstrap file; NULL: none), so that the cell reports the version all of
-- its live instances serve, the minimum.
CREATE TABLE instances (
    id              text PRIMARY KEY,
    started_at      timestamptz NOT NULL DEFAULT now(),
    lease_until     timestamptz NOT NULL,
    refdata_version bigint
);

-- '' for rows written before this migration, and for rows no attempt works
-- on: both count as owned by no live instance.
ALTER TABLE transactions ADD COLUMN owner text NOT NULL DEFAULT '';

---- create above / drop below ----

ALTER TABLE transactions DROP COLUMN owner;
DROP TABLE instances;
