-- Deliveries in hand: one row per record a consumer group has started and not yet finished
-- (handled or dead-lettered). A row written before the handler runs and still there at the
-- next delivery means the process died with the record; `started` counts deliveries so
-- a record that keeps killing its process is dead-lettered (the runtime's crash counting).
CREATE TABLE deliveries (
    consumer_group TEXT   NOT NULL,
    topic          TEXT   NOT NULL,
    part           BIGINT NOT NULL,
    off            BIGINT NOT NULL,
    started        BIGINT NOT NULL,
    first_at_ms    BIGINT NOT NULL,
    last_at_ms     BIGINT NOT NULL,
    PRIMARY KEY (consumer_group, topic, part, off)
);
