package server

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"sync"
	"time"
)

// TokenUseEvery is how often TokenUse.Run writes API token uses.
const TokenUseEvery = 5 * time.Second

// TokenToucher stores when API tokens were last used (the registry).
type TokenToucher interface {
	// TouchAPITokens sets last_used_at of the tokens whose sha256 hashes
	// are used's keys, in one batch, never moving a time back; hashes of
	// tokens that no longer exist are ignored.
	TouchAPITokens(ctx context.Context, used map[[sha256.Size]byte]time.Time) error
}

// TokenUse collects API token uses in memory and writes them in one batch
// (Run, every TokenUseEvery, and Flush at shutdown), so that a request with
// an API token writes nothing. last_used_at lags by up to the interval; a
// manager killed without a shutdown loses the uses since its last write.
// A nil *TokenUse records nothing.
type TokenUse struct {
	store TokenToucher
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	pending map[[sha256.Size]byte]time.Time
}

// NewTokenUse returns a TokenUse that writes to store and logs failed
// writes of Run to log.
func NewTokenUse(store TokenToucher, log *slog.Logger) *TokenUse {
	return &TokenUse{store: store, log: log, now: time.Now, pending: map[[sha256.Size]byte]time.Time{}}
}

// record notes that the API token with this hash was used now.
func (u *TokenUse) record(sum [sha256.Size]byte) {
	if u == nil {
		return
	}
	now := u.now()
	u.mu.Lock()
	u.pending[sum] = now
	u.mu.Unlock()
}

// Flush writes the uses recorded since the last write. On an error the
// uses are kept for the next Flush.
func (u *TokenUse) Flush(ctx context.Context) error {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	batch := u.pending
	if len(batch) == 0 {
		u.mu.Unlock()
		return nil
	}
	u.pending = make(map[[sha256.Size]byte]time.Time, len(batch))
	u.mu.Unlock()
	err := u.store.TouchAPITokens(ctx, batch)
	if err != nil {
		u.mu.Lock()
		for h, at := range batch {
			if later, ok := u.pending[h]; !ok || at.After(later) {
				u.pending[h] = at
			}
		}
		u.mu.Unlock()
	}
	return err
}

// Run flushes every TokenUseEvery until ctx ends; the caller flushes once
// more after the last request (Flush). A failed write is logged and
// retried with the next.
func (u *TokenUse) Run(ctx context.Context) {
	t := time.NewTicker(TokenUseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			wctx, cancel := context.WithTimeout(ctx, TokenUseEvery)
			if err := u.Flush(wctx); err != nil {
				u.log.Error("record api token use", "err", err)
			}
			cancel()
		}
	}
}
