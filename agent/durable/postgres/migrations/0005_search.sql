-- 5: search over what the owner and the model wrote. SQLite keeps an FTS5
-- table; here a GIN index on the expression the search query uses
-- (durable/dialect.go's searchEntries, which must match it). A \u0000 in a
-- text is dropped before the JSON becomes text, which cannot hold it.
CREATE INDEX entries_search ON entries
	USING gin (to_tsvector('simple', replace(record, '\u0000', '')::json ->> 'text'))
	WHERE kind IN ('owner_message', 'assistant_message');
