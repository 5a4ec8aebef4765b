package httpserve

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// HandoffGrace is how long requests told to hand off (see Drain) have to
// send their answer before the remaining connections are closed.
const HandoffGrace = time.Second

// Drain stops servers the way a restart wants: they stop accepting at once
// (a new connection is refused, which a proxy may safely retry), and the
// requests in flight get up to bound to finish. If some are still running
// then, handoff is called: requests waiting on work that need not finish in
// this process (a resolve waiting for a sandbox) answer that the client
// should ask again, which the next process answers. After HandoffGrace
// whatever still runs is cut off. Drain returns when every server is
// closed; the error says what was cut off.
func Drain(bound time.Duration, handoff func(), servers ...*http.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = srv.Shutdown(ctx)
		}()
	}
	wg.Wait()
	if ctx.Err() == nil {
		return nil
	}
	if handoff != nil {
		handoff()
	}
	grace, cancel2 := context.WithTimeout(context.Background(), HandoffGrace)
	defer cancel2()
	for i, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Shutdown again waits for the handed-off requests' answers.
			if err := srv.Shutdown(grace); err != nil {
				errs[i] = errors.Join(errs[i], srv.Close())
			} else {
				errs[i] = nil
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return errors.New("drain: requests were still running at the bound and were cut off")
	}
	return nil
}
