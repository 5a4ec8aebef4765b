-- Model usage through the gateway, per user, model and day.
CREATE TABLE gateway_usage (
    user_id       text NOT NULL,
    model         text NOT NULL,
    day           date NOT NULL,
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    calls         bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, model, day)
);
