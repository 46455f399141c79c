-- 0002_ids_never_reused.sql - ids of deleted studies never come back.
-- A plain INTEGER PRIMARY KEY hands out max(id) + 1, so deleting the newest study gave its
-- id to the next one, and a stale worker's tell landed in an unrelated study. AUTOINCREMENT
-- keeps the largest id ever used in sqlite_sequence. SQLite cannot add it in place: the
-- table is rebuilt by the procedure of https://www.sqlite.org/lang_altertable.html
-- ("Making Other Kinds Of Table Schema Changes"); storage.c runs every migration with
-- foreign keys off and checks them before COMMIT, so dropping the old table cascades
-- nothing. Ids deleted before this migration are unknown to it: the sequence starts at the
-- largest id present.

CREATE TABLE studies_new (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL UNIQUE,
    config     TEXT NOT NULL,        -- the canonical study document (JSON)
    created_ms INTEGER NOT NULL
);
INSERT INTO studies_new(id, name, config, created_ms)
    SELECT id, name, config, created_ms FROM studies;
DROP TABLE studies;
ALTER TABLE studies_new RENAME TO studies;
