package durable

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// MaxID is the largest record ID: IDs stay exact in JSON numbers everywhere.
const MaxID int64 = 1<<53 - 1

// ErrIDExhausted is returned by MintID when no ID is left.
var ErrIDExhausted = errors.New("ID space is exhausted")

// ErrNotFound is returned for a record that does not exist.
var ErrNotFound = errors.New("not found")

// Store keeps the runtime's records (conversations, entries, tasks,
// submissions, usage) on a DB. All IDs come from one global space: a
// committed ID is never issued again, also after a restart. Records
// returned are copies; changing them changes nothing stored.
type Store struct {
	db DB

	failOnce sync.Once
	failed   chan struct{} // closed at the first fatal error
	fatal    error         // that error (ErrLeaseLost, ErrCommitUnknown); read once failed is closed

	mu       sync.Mutex
	nextID   int64 // the next ID of the reserved block
	blockEnd int64 // first ID past the reserved block
	closed   bool
}

// idBlock is how many IDs MintID reserves in the database at a time.
const idBlock = 64

// OpenStore migrates db to the current schema, refusing a newer one, and
// creates the root conversation on first open.
func OpenStore(ctx context.Context, db DB) (*Store, error) {
	if err := migrate(ctx, db, SchemaVersion); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	row, err := db.Get(ctx, `SELECT next_id FROM durable_meta WHERE singleton = 1`)
	if err != nil {
		return nil, fmt.Errorf("open store: read metadata: %w", err)
	}
	next := row["next_id"].(int64)
	s := &Store{nextID: next, blockEnd: next, failed: make(chan struct{})} // no block reserved yet
	s.db = fencedDB{DB: db, s: s}
	if _, err := s.Conversation(ctx, RootConversation); errors.Is(err, ErrNotFound) {
		if err := s.Commit(ctx, Writes{Conversations: []Conversation{{ID: RootConversation, CreatedAt: time.Now().UTC()}}}); err != nil {
			return nil, fmt.Errorf("open store: create root conversation: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return s, nil
}

// Close closes the store and its DB.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	return s.db.Close()
}

func (s *Store) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("store: %w", ErrClosed)
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// fail ends the store's writing life at a fatal error (see Fatal): from
// now on every call fails with it, and Failed is closed.
func (s *Store) fail(err error) {
	s.failOnce.Do(func() { // not under mu: MintID holds it while it writes
		s.fatal = err
		close(s.failed)
	})
}

// Failed is closed when a write failed in a way that ends the store
// (another process took the lease, or a commit's outcome is unknown); Err
// then says which. The harness stops on it.
func (s *Store) Failed() <-chan struct{} { return s.failed }

// Err is the error that closed Failed, or nil.
func (s *Store) Err() error {
	select {
	case <-s.failed:
		return s.fatal
	default:
		return nil
	}
}

// fencedDB is the store's DB: a write whose error is fatal fails the store.
type fencedDB struct {
	DB
	s *Store
}

func (f fencedDB) check(err error) error {
	if Fatal(err) {
		f.s.fail(err)
	}
	return err
}

func (f fencedDB) Exec(ctx context.Context, q string) error { return f.check(f.DB.Exec(ctx, q)) }

func (f fencedDB) Run(ctx context.Context, q string, args ...any) error {
	return f.check(f.DB.Run(ctx, q, args...))
}

func (f fencedDB) Transaction(ctx context.Context, fn func(tx Executor) error) error {
	return f.check(f.DB.Transaction(ctx, fn))
}

// MintID returns a fresh ID. IDs are allocated in the database, a block at
// a time (the block is recorded before any of it is handed out), so no ID
// is ever issued twice, committed or not, across restarts too.
func (s *Store) MintID() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("store: %w", ErrClosed)
	}
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("store: %w", err)
	}
	if s.nextID > MaxID {
		return 0, ErrIDExhausted
	}
	if s.nextID >= s.blockEnd {
		if err := s.reserve(); err != nil {
			return 0, err
		}
	}
	id := s.nextID
	s.nextID++
	return id, nil
}

// reserve records the next block of IDs in the database. Caller holds mu.
func (s *Store) reserve() error {
	ctx := context.Background()
	return s.db.Transaction(ctx, func(tx Executor) error {
		row, err := tx.Get(ctx, `SELECT next_id FROM durable_meta WHERE singleton = 1`)
		if err != nil {
			return fmt.Errorf("reserve IDs: %w", err)
		}
		start := max(row["next_id"].(int64), s.nextID)
		if start > MaxID {
			return ErrIDExhausted
		}
		end := min(start+idBlock, MaxID+1)
		if err := tx.Run(ctx, `UPDATE durable_meta SET next_id = ? WHERE singleton = 1`, end); err != nil {
			return fmt.Errorf("reserve IDs: %w", err)
		}
		s.nextID, s.blockEnd = start, end
		return nil
	})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("durable: encode record: %v", err)) // records are plain data
	}
	return string(b)
}

func millis(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

// Commit writes w atomically: either all of it is stored or nothing is.
func (s *Store) Commit(ctx context.Context, w Writes) error {
	if err := s.check(); err != nil {
		return err
	}
	// Encode before the transaction so later changes to w change nothing.
	type enc struct {
		id   int64
		json string
	}
	var convs, entries, tasks, subs []enc
	maxID := int64(0)
	note := func(id int64) error {
		if id <= 0 || id > MaxID {
			return fmt.Errorf("commit: invalid record ID %d", id)
		}
		maxID = max(maxID, id)
		return nil
	}
	for _, c := range w.Conversations {
		if err := note(c.ID); err != nil {
			return err
		}
		convs = append(convs, enc{c.ID, mustJSON(c)})
	}
	for _, e := range w.Entries {
		if err := note(e.ID); err != nil {
			return err
		}
		e.CommitSeq = 0
		entries = append(entries, enc{e.ID, mustJSON(e)})
	}
	for _, t := range w.Tasks {
		if err := note(t.ID); err != nil {
			return err
		}
		tasks = append(tasks, enc{t.ID, mustJSON(t)})
	}
	for _, sb := range w.Submissions {
		if err := note(sb.ID); err != nil {
			return err
		}
		subs = append(subs, enc{sb.ID, mustJSON(sb)})
	}
	for _, n := range w.Notes {
		if n.Name == "" || n.Version < 1 {
			return fmt.Errorf("commit: a note needs a name and a version from 1, not %q at %d", n.Name, n.Version)
		}
	}

	err := s.db.Transaction(ctx, func(tx Executor) error {
		meta, err := tx.Get(ctx, `SELECT next_id, next_seq FROM durable_meta WHERE singleton = 1`)
		if err != nil {
			return err
		}
		seq := meta["next_seq"].(int64)
		claim := func(id int64, typ string, unique bool) error {
			row, err := tx.Get(ctx, `SELECT record_type FROM record_ids WHERE id = ?`, id)
			switch {
			case errors.Is(err, ErrNoRows):
				return tx.Run(ctx, `INSERT INTO record_ids (id, record_type) VALUES (?, ?)`, id, typ)
			case err != nil:
				return err
			}
			if owner := row["record_type"].(string); unique || owner != typ {
				return fmt.Errorf("ID %d already belongs to %s", id, owner)
			}
			return nil
		}
		for i, c := range convs {
			if err := claim(c.id, "conversation", true); err != nil {
				return err
			}
			if err := tx.Run(ctx, `INSERT INTO conversations (id, record) VALUES (?, ?)`, c.id, c.json); err != nil {
				return err
			}
			_ = i
		}
		for i, e := range entries {
			rec := w.Entries[i]
			if _, err := tx.Get(ctx, `SELECT 1 AS one FROM conversations WHERE id = ?`, rec.ConversationID); errors.Is(err, ErrNoRows) {
				return fmt.Errorf("entry %d: unknown conversation %d", rec.ID, rec.ConversationID)
			} else if err != nil {
				return err
			}
			if err := claim(e.id, "entry", true); err != nil {
				return err
			}
			var head any
			if rec.Head != 0 {
				head = rec.Head
			}
			if err := tx.Run(ctx, `INSERT INTO entries (id, conversation_id, kind, head, commit_seq, record) VALUES (?, ?, ?, ?, ?, ?)`,
				e.id, rec.ConversationID, string(rec.Kind), head, seq, e.json); err != nil {
				return err
			}
		}
		for i, t := range tasks {
			rec := w.Tasks[i]
			if err := claim(t.id, "task", false); err != nil {
				return err
			}
			if err := tx.Run(ctx, `INSERT INTO tasks (id, conversation_id, kind, state, deadline, record) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET conversation_id = excluded.conversation_id, kind = excluded.kind,
				state = excluded.state, deadline = excluded.deadline, record = excluded.record`,
				t.id, rec.ConversationID, rec.Kind, string(rec.State), millis(rec.Deadline), t.json); err != nil {
				return err
			}
		}
		for i, sb := range subs {
			rec := w.Submissions[i]
			if err := claim(sb.id, "submission", false); err != nil {
				return err
			}
			var reqID any
			if rec.RequestID != "" {
				reqID = rec.RequestID
			}
			if err := tx.Run(ctx, `INSERT INTO submissions (id, conversation_id, request_id, status, record) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET conversation_id = excluded.conversation_id, request_id = excluded.request_id,
				status = excluded.status, record = excluded.record`,
				sb.id, rec.ConversationID, reqID, string(rec.Status), sb.json); err != nil {
				return err
			}
		}
		for _, u := range w.Usage {
			if err := tx.Run(ctx, `INSERT INTO usage (conversation_id, kind, name, input_tokens, output_tokens, calls) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (conversation_id, kind, name) DO UPDATE SET input_tokens = usage.input_tokens + excluded.input_tokens,
				output_tokens = usage.output_tokens + excluded.output_tokens, calls = usage.calls + excluded.calls`,
				u.ConversationID, u.Kind, u.Name, u.InputTokens, u.OutputTokens, u.Calls); err != nil {
				return err
			}
		}
		for _, n := range w.Notes {
			row, err := tx.Get(ctx, `SELECT version FROM notes WHERE name = ?`, n.Name)
			stored := int64(0)
			switch {
			case err == nil:
				stored = row["version"].(int64)
			case !errors.Is(err, ErrNoRows):
				return err
			}
			if stored != n.Version-1 {
				return fmt.Errorf("notes %q are at version %d, not %d: %w", n.Name, stored, n.Version-1, ErrNoteChanged)
			}
			if err := tx.Run(ctx, `INSERT INTO notes (name, version, record) VALUES (?, ?, ?)
				ON CONFLICT (name) DO UPDATE SET version = excluded.version, record = excluded.record`, n.Name, n.Version, mustJSON(n)); err != nil {
				return err
			}
		}
		for k, v := range w.Settings {
			if err := tx.Run(ctx, `INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, k, v); err != nil {
				return err
			}
		}
		next := max(meta["next_id"].(int64), maxID+1)
		return tx.Run(ctx, `UPDATE durable_meta SET next_id = ?, next_seq = ? WHERE singleton = 1`, next, seq+1)
	})
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	s.mu.Lock()
	s.nextID = max(s.nextID, maxID+1)
	s.mu.Unlock()
	return nil
}

// Order is a scan direction.
type Order string

// Scan orders.
const (
	Asc  Order = "asc"
	Desc Order = "desc"
)

// Scan is a page request: Cursor continues a previous Page.Next of the same
// order. A cursor is an opaque string and survives a JSON round trip.
type Scan struct {
	Order  Order
	Cursor string
	Limit  int
}

// Page is one page of a scan; Next is empty on the last page.
type Page[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next,omitempty"`
}

type cursor struct {
	Order Order `json:"o"`
	After int64 `json:"a"`
}

// ErrBadCursor is returned for a cursor that does not fit the scan.
var ErrBadCursor = errors.New("invalid cursor")

func (sc Scan) bounds() (order Order, after int64, limit int, err error) {
	order, limit = sc.Order, sc.Limit
	if order == "" {
		order = Asc
	}
	if order != Asc && order != Desc {
		return "", 0, 0, fmt.Errorf("%w: unknown order %q", ErrBadCursor, order)
	}
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	if sc.Cursor == "" {
		return order, 0, limit, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(sc.Cursor)
	var c cursor
	if err != nil || json.Unmarshal(b, &c) != nil || c.After <= 0 {
		return "", 0, 0, fmt.Errorf("%w: cannot decode it", ErrBadCursor)
	}
	if c.Order != order {
		return "", 0, 0, fmt.Errorf("%w: it continues a %s scan, not %s", ErrBadCursor, c.Order, order)
	}
	return order, c.After, limit, nil
}

// scan pages through rows of table matching where (with args), by id.
func scan[T any](ctx context.Context, s *Store, table, where string, args []any, sc Scan) (Page[T], error) {
	if err := s.check(); err != nil {
		return Page[T]{}, err
	}
	order, after, limit, err := sc.bounds()
	if err != nil {
		return Page[T]{}, err
	}
	q := "SELECT id, record FROM " + table + " WHERE " + where
	if after > 0 {
		if order == Asc {
			q += " AND id > ?"
		} else {
			q += " AND id < ?"
		}
		args = append(args, after)
	}
	q += " ORDER BY id " + strings.ToUpper(string(order)) + " LIMIT ?"
	args = append(args, limit+1)
	rows, err := s.db.All(ctx, q, args...)
	if err != nil {
		return Page[T]{}, err
	}
	var p Page[T]
	for i, r := range rows {
		if i == limit {
			c, _ := json.Marshal(cursor{Order: order, After: rows[limit-1]["id"].(int64)})
			p.Next = base64.RawURLEncoding.EncodeToString(c)
			break
		}
		var v T
		if err := json.Unmarshal([]byte(r["record"].(string)), &v); err != nil {
			return Page[T]{}, fmt.Errorf("decode %s %v: %w", table, r["id"], err)
		}
		p.Items = append(p.Items, v)
	}
	return p, nil
}

func one[T any](ctx context.Context, s *Store, q string, args ...any) (T, error) {
	var v T
	if err := s.check(); err != nil {
		return v, err
	}
	row, err := s.db.Get(ctx, q, args...)
	if errors.Is(err, ErrNoRows) {
		return v, ErrNotFound
	}
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal([]byte(row["record"].(string)), &v); err != nil {
		return v, fmt.Errorf("decode record: %w", err)
	}
	return v, nil
}

// Conversation returns one conversation.
func (s *Store) Conversation(ctx context.Context, id int64) (Conversation, error) {
	return one[Conversation](ctx, s, `SELECT record FROM conversations WHERE id = ?`, id)
}

// Conversations pages through all conversations.
func (s *Store) Conversations(ctx context.Context, sc Scan) (Page[Conversation], error) {
	return scan[Conversation](ctx, s, "conversations", "1 = 1", nil, sc)
}

// Entry returns one entry, with its commit sequence number.
func (s *Store) Entry(ctx context.Context, id int64) (Entry, error) {
	if err := s.check(); err != nil {
		return Entry{}, err
	}
	row, err := s.db.Get(ctx, `SELECT record, commit_seq FROM entries WHERE id = ?`, id)
	if errors.Is(err, ErrNoRows) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	if err := json.Unmarshal([]byte(row["record"].(string)), &e); err != nil {
		return Entry{}, err
	}
	e.CommitSeq = row["commit_seq"].(int64)
	return e, nil
}

// Entries pages through a conversation's entries by ID.
func (s *Store) Entries(ctx context.Context, conv int64, sc Scan) (Page[Entry], error) {
	if _, err := s.Conversation(ctx, conv); err != nil {
		return Page[Entry]{}, fmt.Errorf("conversation %d: %w", conv, err)
	}
	return scan[Entry](ctx, s, "entries", "conversation_id = ?", []any{conv}, sc)
}

// RecentEntries returns the newest entries across every conversation,
// newest first, at most limit (the owner's activity across an agent).
func (s *Store) RecentEntries(ctx context.Context, limit int) ([]Entry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.db.All(ctx, `SELECT record FROM entries ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(rows))
	for _, row := range rows {
		var e Entry
		if err := json.Unmarshal([]byte(row["record"].(string)), &e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// EntryCount returns how many entries a conversation has.
func (s *Store) EntryCount(ctx context.Context, conv int64) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	row, err := s.db.Get(ctx, `SELECT count(*) AS n FROM entries WHERE conversation_id = ?`, conv)
	if err != nil {
		return 0, err
	}
	return row["n"].(int64), nil
}

// LatestHead returns the newest reset marker or summary of a conversation.
func (s *Store) LatestHead(ctx context.Context, conv int64) (Entry, error) {
	return one[Entry](ctx, s, `SELECT record FROM entries WHERE conversation_id = ? AND head IS NOT NULL ORDER BY id DESC LIMIT 1`, conv)
}

// FirstEntryOf returns conv's oldest entry of kind with ID >= from
// (ErrNotFound when there is none), without reading the others.
func (s *Store) FirstEntryOf(ctx context.Context, conv int64, kind EntryKind, from int64) (Entry, error) {
	return one[Entry](ctx, s, `SELECT record FROM entries WHERE conversation_id = ? AND kind = ? AND id >= ? ORDER BY id LIMIT 1`, conv, string(kind), from)
}

// scanAll reads every page of a scan, oldest first.
func scanAll[T any](ctx context.Context, page func(Scan) (Page[T], error)) ([]T, error) {
	var out []T
	sc := Scan{Order: Asc, Limit: 1000}
	for {
		p, err := page(sc)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Items...)
		if p.Next == "" {
			return out, nil
		}
		sc.Cursor = p.Next
	}
}

// EntriesSince returns every entry of conv with ID >= from, oldest first.
func (s *Store) EntriesSince(ctx context.Context, conv, from int64) ([]Entry, error) {
	return scanAll(ctx, func(sc Scan) (Page[Entry], error) {
		return scan[Entry](ctx, s, "entries", "conversation_id = ? AND id >= ?", []any{conv, from}, sc)
	})
}

// inList is a "col IN (?, ...)" filter, or no filter for no values.
func inList[V ~string](col string, values []V) (string, []any) {
	if len(values) == 0 {
		return "1 = 1", nil
	}
	args := make([]any, len(values))
	for i, v := range values {
		args[i] = string(v)
	}
	return col + " IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(values)), ", ") + ")", args
}

// Task returns one task.
func (s *Store) Task(ctx context.Context, id int64) (Task, error) {
	return one[Task](ctx, s, `SELECT record FROM tasks WHERE id = ?`, id)
}

// Tasks pages through tasks in the given states (all when none given).
func (s *Store) Tasks(ctx context.Context, states []TaskState, sc Scan) (Page[Task], error) {
	where, args := inList("state", states)
	return scan[Task](ctx, s, "tasks", where, args, sc)
}

// LiveTasks returns every task that is not terminal, oldest first.
func (s *Store) LiveTasks(ctx context.Context) ([]Task, error) {
	return scanAll(ctx, func(sc Scan) (Page[Task], error) {
		return s.Tasks(ctx, []TaskState{Pending, Running, Sleeping, Waiting, Completing}, sc)
	})
}

// Submission returns one submission.
func (s *Store) Submission(ctx context.Context, id int64) (Submission, error) {
	return one[Submission](ctx, s, `SELECT record FROM submissions WHERE id = ?`, id)
}

// SubmissionByRequest finds a submission by its requestId in a conversation.
func (s *Store) SubmissionByRequest(ctx context.Context, conv int64, requestID string) (Submission, error) {
	return one[Submission](ctx, s, `SELECT record FROM submissions WHERE conversation_id = ? AND request_id = ?`, conv, requestID)
}

// Submissions pages through submissions with the given statuses (all when none given).
func (s *Store) Submissions(ctx context.Context, statuses []SubmissionStatus, sc Scan) (Page[Submission], error) {
	where, args := inList("status", statuses)
	return scan[Submission](ctx, s, "submissions", where, args, sc)
}

// Usage returns a conversation's usage ledger.
func (s *Store) Usage(ctx context.Context, conv int64) (Usage, error) {
	if err := s.check(); err != nil {
		return Usage{}, err
	}
	rows, err := s.db.All(ctx, `SELECT kind, name, input_tokens, output_tokens, calls FROM usage WHERE conversation_id = ?`, conv)
	if err != nil {
		return Usage{}, err
	}
	u := Usage{Models: map[string]ModelUsage{}, Tools: map[string]int64{}}
	for _, r := range rows {
		name := r["name"].(string)
		if r["kind"] == "model" {
			u.Models[name] = ModelUsage{InputTokens: r["input_tokens"].(int64), OutputTokens: r["output_tokens"].(int64), Calls: r["calls"].(int64)}
		} else {
			u.Tools[name] = r["calls"].(int64)
		}
	}
	return u, nil
}

// ErrNoteChanged is returned by a commit of a note whose stored version is
// not the one it was written from: someone else wrote it meanwhile.
var ErrNoteChanged = errors.New("the notes changed meanwhile")

// Note returns the note called name; one never written is empty, at
// version 0.
func (s *Store) Note(ctx context.Context, name string) (Note, error) {
	n, err := one[Note](ctx, s, `SELECT record FROM notes WHERE name = ?`, name)
	if errors.Is(err, ErrNotFound) {
		return Note{Name: name}, nil
	}
	return n, err
}

// LastEntryOf returns conv's newest entry of kind (ErrNotFound when there
// is none), without reading the others.
func (s *Store) LastEntryOf(ctx context.Context, conv int64, kind EntryKind) (Entry, error) {
	return one[Entry](ctx, s, `SELECT record FROM entries WHERE conversation_id = ? AND kind = ? ORDER BY id DESC LIMIT 1`, conv, string(kind))
}

// Setting returns a host setting, or "" when unset.
func (s *Store) Setting(ctx context.Context, key string) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	row, err := s.db.Get(ctx, `SELECT value FROM settings WHERE key = ?`, key)
	if errors.Is(err, ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return row["value"].(string), nil
}

// SetSetting stores a host setting.
func (s *Store) SetSetting(ctx context.Context, key, value string) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.db.Run(ctx, `INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
}

// RunEntries returns the entries a run (a task) wrote in conv, oldest first.
func (s *Store) RunEntries(ctx context.Context, conv, run int64) ([]Entry, error) {
	all, err := s.EntriesSince(ctx, conv, run)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range all {
		if e.RunID == run {
			out = append(out, e)
		}
	}
	return out, nil
}

// RenameConversation sets a conversation's title (ErrNotFound if there is none).
func (s *Store) RenameConversation(ctx context.Context, id int64, title string) error {
	if err := s.check(); err != nil {
		return err
	}
	if _, err := s.Conversation(ctx, id); err != nil {
		return err
	}
	return s.db.Run(ctx, setTitle.in(s.db), title, id)
}

// ArchiveConversation puts a conversation away, or back (ErrNotFound if
// there is none). Nothing of it is deleted: it stays readable by its id.
func (s *Store) ArchiveConversation(ctx context.Context, id int64, archived bool) error {
	if err := s.check(); err != nil {
		return err
	}
	if _, err := s.Conversation(ctx, id); err != nil {
		return err
	}
	if !archived {
		return s.db.Run(ctx, clearArchived.in(s.db), id)
	}
	return s.db.Run(ctx, setArchived.in(s.db), id)
}

// RunInput returns the input of the submission a run (a generation task)
// answers: who sent it and at which hop. A task that answers no submission
// has the zero Input.
func RunInput(ctx context.Context, s *Store, run int64) (Input, error) {
	t, err := s.Task(ctx, run)
	if err != nil {
		return Input{}, fmt.Errorf("read run %d: %w", run, err)
	}
	if t.SubmissionID == 0 {
		return Input{}, nil
	}
	sub, err := s.Submission(ctx, t.SubmissionID)
	if err != nil {
		return Input{}, fmt.Errorf("read submission %d: %w", t.SubmissionID, err)
	}
	return sub.Input, nil
}
