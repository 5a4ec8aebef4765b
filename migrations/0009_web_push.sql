-- Web Push (RFC 8030, 8291, 8292) to the owner's browsers, next to ntfy.
--
-- The manager's VAPID key pair (P-256): made once by the first manager that
-- needs it and kept here, so every manager signs with the same key. Browsers
-- bind each subscription to the public key: a new key orphans them all.
CREATE TABLE vapid_keys (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),  -- one row
    private_key bytea NOT NULL CHECK (octet_length(private_key) = 32),
    public_key  bytea NOT NULL CHECK (octet_length(public_key) = 65),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A browser's push subscription belongs to the web session that made it:
-- sign-out, a revoke, a new password and a deleted user drop it with the
-- session. It references the session's id (unique, what a revoke names),
-- not its primary key, the token's hash: that stays in one table. An
-- endpoint is one browser's: subscribing it again moves it to the session
-- that sends it. last_sent_at and last_error record the latest push try.
CREATE TABLE push_subscriptions (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    session_id   bigint NOT NULL REFERENCES session (id) ON DELETE CASCADE,
    endpoint     text NOT NULL UNIQUE CHECK (octet_length(endpoint) <= 2048),
    p256dh       bytea NOT NULL CHECK (octet_length(p256dh) = 65),
    auth         bytea NOT NULL CHECK (octet_length(auth) = 16),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_sent_at timestamptz,
    last_error   text NOT NULL DEFAULT ''
);
CREATE INDEX push_subscriptions_by_user ON push_subscriptions (user_id, created_at);
CREATE INDEX push_subscriptions_by_session ON push_subscriptions (session_id);

-- What a notification is about, for the push payload: its kind (reminder,
-- approval, job, spend; '' from agents that do not say) and the agent it
-- comes from ('' when none).
ALTER TABLE notifications ADD COLUMN kind text NOT NULL DEFAULT '';
ALTER TABLE notifications ADD COLUMN agent text NOT NULL DEFAULT '';
