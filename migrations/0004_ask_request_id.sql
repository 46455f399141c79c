-- 0004_ask_request_id.sql - the request_id an ask was made with, on each trial it handed
-- out: an ask retried with the same worker and request_id (its answer lost to a dropped
-- connection or a daemon restart) is answered with the trials it handed out while they
-- are pending, instead of handing out more, which stayed pending until their lease
-- expired and held a closed bbkb batch meanwhile. NULL for asks without one (all trials
-- before this migration).

ALTER TABLE trials ADD COLUMN request_id TEXT;
