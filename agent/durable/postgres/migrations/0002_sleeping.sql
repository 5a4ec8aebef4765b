-- 2: waiting becomes a stored state: tasks gain 'sleeping' and an indexed
-- deadline.
ALTER TABLE tasks DROP CONSTRAINT tasks_state;
ALTER TABLE tasks ADD CONSTRAINT tasks_state CHECK (state IN ('pending', 'running', 'sleeping', 'waiting', 'completing', 'terminal'));
ALTER TABLE tasks ADD COLUMN deadline BIGINT;
CREATE INDEX tasks_by_deadline ON tasks (deadline) WHERE state = 'sleeping';
