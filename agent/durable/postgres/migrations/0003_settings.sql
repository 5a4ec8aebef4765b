-- 3: small named settings of the host (the current conversation).
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
