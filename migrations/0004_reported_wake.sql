-- The next due time each agent reports whenever it changes (not only when
-- asked to pause), so the manager can still wake a sandbox whose agent did
-- not answer /pause, and can tell a sandbox that died with work in flight.
ALTER TABLE sandboxes ADD COLUMN reported_wake_at timestamptz;
ALTER TABLE sandboxes ADD COLUMN reported_at timestamptz;
