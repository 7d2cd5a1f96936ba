-- Crash-loop quarantine. A death convicts no one by itself: the records a process held when
-- it died become suspects, run alone (no other record of the replica in flight), and only
-- deaths while running alone count: those of a process that died of its own fault (its
-- cause recorded below), or twice as many that nobody saw.
--   life          the process life that claimed the delivery last (a new id per start)
--   held          1 while a delivery is in hand (claimed, not released)
--   alone         1 when the delivery in hand runs alone
--   deaths        deaths with this record in hand, of any kind
--   died_life     the life found dead with the delivery before this one in hand ('' if none)
--   died_alone    1 when that delivery ran alone
ALTER TABLE deliveries ADD COLUMN life TEXT NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN held BIGINT NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN alone BIGINT NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN deaths BIGINT NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN died_life TEXT NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN died_alone BIGINT NOT NULL DEFAULT 0;
-- Claims left by the rule before this one: still in hand, deaths unknown (not counted).
UPDATE deliveries SET held = CASE WHEN started > 0 THEN 1 ELSE 0 END;

-- How a process life ended, recorded by its successor from what the supervisor saw (a
-- signal, an exit status, the last lines on stderr). A life with no row here ended in a way
-- nobody saw: killed from outside with its supervisor, or its node lost.
CREATE TABLE process_deaths (
    life   TEXT   NOT NULL PRIMARY KEY,
    cause  TEXT   NOT NULL,
    at_ms  BIGINT NOT NULL
);

-- The evidence: each death found with a record in hand, whether the record ran alone, and
-- how many records that life was found holding.
CREATE TABLE delivery_deaths (
    consumer_group TEXT   NOT NULL,
    topic          TEXT   NOT NULL,
    part           BIGINT NOT NULL,
    off            BIGINT NOT NULL,
    life           TEXT   NOT NULL,
    alone          BIGINT NOT NULL,
    in_hand        BIGINT NOT NULL,
    found_at_ms    BIGINT NOT NULL
);
CREATE INDEX delivery_deaths_by_record ON delivery_deaths (consumer_group, topic, part, off);
CREATE INDEX delivery_deaths_by_life ON delivery_deaths (consumer_group, life);
