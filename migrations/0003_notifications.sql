-- Where a user's notifications go: an ntfy-compatible topic URL or a webhook.
ALTER TABLE users ADD COLUMN notify_url text NOT NULL DEFAULT '';

-- Notifications handed over by sandboxes (reminders), delivered at least once.
CREATE TABLE notifications (
    id              bigserial PRIMARY KEY,
    user_id         text NOT NULL,
    key             text NOT NULL,           -- the sandbox's idempotency key
    text            text NOT NULL,
    due_at          timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed', 'no_endpoint')),
    tries           integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    UNIQUE (user_id, key)
);
CREATE INDEX notifications_due ON notifications (next_attempt_at) WHERE status = 'pending';

-- Every delivery try, successful or not.
CREATE TABLE notification_attempts (
    notification_id bigint NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    try             integer NOT NULL,
    at              timestamptz NOT NULL DEFAULT now(),
    status_code     integer,
    error           text NOT NULL DEFAULT '',
    PRIMARY KEY (notification_id, try)
);
