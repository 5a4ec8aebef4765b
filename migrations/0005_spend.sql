-- Spend: every model call reserves its worst case here before it runs and
-- is settled to what it cost after (micro-dollars). Reservations of one user
-- are serialized by an advisory lock, so concurrent calls cannot together
-- pass a limit.
CREATE TABLE spend (
    id              bigserial PRIMARY KEY,
    user_id         text NOT NULL,
    model           text NOT NULL,
    at              timestamptz NOT NULL DEFAULT now(),
    reserved_micros bigint NOT NULL CHECK (reserved_micros >= 0),
    cost_micros     bigint CHECK (cost_micros >= 0),
    settled         boolean NOT NULL DEFAULT false
);
CREATE INDEX spend_user_at ON spend (user_id, at);

-- A user's own limits (absent: the manager's defaults), and the day the
-- owner allowed another day's spend once.
CREATE TABLE spend_limits (
    user_id        text PRIMARY KEY,
    daily_micros   bigint CHECK (daily_micros >= 0),
    monthly_micros bigint CHECK (monthly_micros >= 0),
    raised_on      date
);
