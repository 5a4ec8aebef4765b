-- 4: entries of one kind in a conversation, found without reading the rest.
CREATE INDEX entries_by_kind ON entries (conversation_id, kind, id);
