-- 0003_study_state.sql - a study's state, set by its owner (PATCH /v1/studies/{id}):
-- 'active' hands out trials, 'paused' hands out none until resumed, 'completed' (terminal)
-- hands out none for good; tells of trials already handed out are taken in every state.
-- It lives in the studies row, not in the event log: it is not an engine call, so
-- replays and snapshots never see it. Existing studies were all handing out trials:
-- they become 'active'.

ALTER TABLE studies ADD COLUMN state TEXT NOT NULL DEFAULT 'active'
    CHECK (state IN ('active', 'paused', 'completed'));
