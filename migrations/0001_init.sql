-- 0001_init.sql - the initial kbandit schema.
-- Times are integer milliseconds since the Unix epoch (UTC). Coordinates (x) are BLOBs of
-- little-endian IEEE-754 doubles, dim entries each. Values in `trials` are in the user's
-- direction; values in `events` and `observations` are what the engine saw (negated for
-- minimize), so replaying `events` in seq order is exactly the engine's call sequence.

CREATE TABLE candidate_sets (
    id         INTEGER PRIMARY KEY,
    n_rows     INTEGER NOT NULL CHECK (n_rows > 0),
    dim        INTEGER NOT NULL CHECK (dim > 0),
    names      TEXT,                 -- JSON array of dim strings, or NULL
    data       BLOB NOT NULL,        -- n_rows * dim doubles, row-major
    created_ms INTEGER NOT NULL
);

CREATE TABLE studies (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    config     TEXT NOT NULL,        -- the canonical study document (JSON)
    created_ms INTEGER NOT NULL
);

CREATE TABLE trials (
    study_id        INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
    id              INTEGER NOT NULL, -- the engine's handle
    state           TEXT NOT NULL CHECK (state IN ('pending','completed','failed','expired')),
    worker          TEXT NOT NULL,
    candidate_index INTEGER,
    x               BLOB NOT NULL,
    value           REAL,
    reason          TEXT,
    created_ms      INTEGER NOT NULL,
    lease_ms        INTEGER NOT NULL,
    completed_ms    INTEGER,
    PRIMARY KEY (study_id, id)
) WITHOUT ROWID;

CREATE TABLE events (
    study_id INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
    seq      INTEGER NOT NULL,
    kind     TEXT NOT NULL CHECK (kind IN ('ask','tell','abandon','observe')),
    trial_id INTEGER,                -- ask/tell/abandon
    value    REAL,                   -- tell/observe, engine units
    x        BLOB,                   -- observe
    PRIMARY KEY (study_id, seq)
) WITHOUT ROWID;

CREATE TABLE observations (
    study_id   INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,     -- its event
    x          BLOB NOT NULL,
    value      REAL NOT NULL,        -- user's direction
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (study_id, seq)
) WITHOUT ROWID;

CREATE TABLE snapshots (
    study_id   INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
    event_seq  INTEGER NOT NULL,     -- events 1..event_seq are inside the snapshot
    bytes      BLOB NOT NULL,        -- kb_engine_snapshot()
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (study_id, event_seq)
) WITHOUT ROWID;

-- One row per resparsification (epoch change); the dictionary itself is implied by the
-- engine snapshot / event log at event_seq.
CREATE TABLE dictionaries (
    study_id   INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
    epoch      INTEGER NOT NULL,
    dict_size  INTEGER NOT NULL,
    batch_size INTEGER NOT NULL,
    event_seq  INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (study_id, epoch)
) WITHOUT ROWID;
