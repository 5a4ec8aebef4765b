package browser

import (
	"context"
	"time"
)

// Run adopts the browser sandboxes that exist (a manager restart) and
// then moves idle ones down the tiers every tick, until ctx ends.
func (s *Service) Run(ctx context.Context, tick time.Duration) {
	if states, err := s.cfg.Engine.List(ctx); err != nil {
		s.cfg.Log.Warn("browser: list sandboxes", "err", err)
	} else {
		now := s.cfg.Now()
		for user, state := range states {
			u := s.user(user)
			u.op.Lock()
			// Their idle time starts now: nothing says how long they sat.
			u.lastUse = now
			switch state {
			case "running":
				u.tier = tierUp
			case "paused":
				u.tier = tierPaused
			default:
				u.tier = tierStopped
			}
			u.op.Unlock()
		}
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sweep(ctx)
		}
	}
}

// Sweep moves every browser sandbox idle long enough to its tier: paused,
// stopped, removed (the profile volume stays). A sandbox in use is left.
func (s *Service) Sweep(ctx context.Context) {
	s.mu.Lock()
	users := make(map[string]*userState, len(s.users))
	for id, u := range s.users {
		users[id] = u
	}
	s.mu.Unlock()
	now := s.cfg.Now()
	for id, u := range users {
		if !u.op.TryLock() {
			continue
		}
		idle := now.Sub(u.lastUse)
		want := u.tier
		switch {
		case s.cfg.IdleRemove > 0 && idle >= s.cfg.IdleRemove:
			want = tierRemoved
		case s.cfg.IdleStop > 0 && idle >= s.cfg.IdleStop:
			want = tierStopped
		case s.cfg.IdlePause > 0 && idle >= s.cfg.IdlePause:
			want = tierPaused
		}
		if want > u.tier {
			if u.sess != nil {
				u.sess.close()
				u.sess = nil
			}
			var err error
			switch want {
			case tierPaused:
				err = s.cfg.Engine.Pause(ctx, id)
			case tierStopped:
				err = s.cfg.Engine.Stop(ctx, id)
			case tierRemoved:
				err = s.cfg.Engine.Remove(ctx, id)
			}
			if err != nil {
				s.cfg.Log.Warn("browser: idle tier", "user", id, "tier", want, "err", err)
			} else {
				u.tier = want
				s.cfg.Log.Info("browser: idle", "user", id, "tier", tierNames[want])
				s.audit(id, "browser."+tierNames[want], map[string]any{"idle": idle.Round(time.Second).String()})
			}
		}
		u.op.Unlock()
	}
}
