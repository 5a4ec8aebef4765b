-- Web session tokens are stored as sha256 hashes only, like API tokens and
-- invites: a copy of the database (a dump, a backup, a replica) holds no
-- session anyone can use. The manager hashes the cookie's token to look it
-- up.
--
-- The sessions stored before this held their tokens in clear, and so do
-- every backup, dump and WAL segment made until now: hashing them in place
-- would keep those copies usable for up to 30 days. They are ended
-- instead; their users sign in again.
DELETE FROM session;
ALTER TABLE session DROP COLUMN token;
ALTER TABLE session ADD COLUMN token_hash bytea NOT NULL CHECK (octet_length(token_hash) = 32);
ALTER TABLE session ADD PRIMARY KEY (token_hash);
