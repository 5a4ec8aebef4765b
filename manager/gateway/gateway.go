// Package gateway is the manager's model gateway: an OpenAI-compatible
// chat/completions endpoint that sandboxes reach through Caddy's gateway
// listener. It authenticates the sandbox, records usage per user, and
// forwards to the configured provider, which holds the real key; model
// secrets never enter a sandbox.
package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/openai"
	"github.com/affido/affido/internal/scripted"
	"github.com/affido/affido/manager/spend"
)

// Provider answers chat completion requests.
type Provider interface {
	// Known reports whether the provider serves model.
	Known(model string) bool
	// List returns the models to advertise.
	List() []string
	// Serve writes the answer to w and returns the usage it saw. req is
	// the validated request; a provider sends nothing else upstream.
	Serve(ctx context.Context, w http.ResponseWriter, req openai.ChatRequest) (openai.ChatUsage, error)
}

// The scripted model is the provider of the dev stack and the tests.
var _ Provider = (*scripted.Model)(nil)

// Caller is who is calling: the user whose sandbox presented its token
// from its own address. status is non-zero when the call is refused.
type Caller func(r *http.Request) (user string, status int, why string)

// UsageRecorder stores per-user usage.
type UsageRecorder interface {
	RecordUsage(ctx context.Context, user, model string, in, out int64) error
}

// Handler serves /v1/gateway/chat/completions and /v1/gateway/models.
type Handler struct {
	Caller   Caller
	Provider Provider
	Usage    UsageRecorder
	Log      *slog.Logger

	// Spend control. With a Ledger, every call to a priced model reserves
	// its worst case first (refused with 402 past a limit) and is settled
	// to its cost after; a model with no price is refused unless Free.
	// Without a Ledger nothing is charged or refused (tests).
	Prices  map[string]spend.Price
	Free    map[string]bool
	Ledger  spend.Ledger
	Limits  spend.Limits      // the default daily and monthly limits
	OnLimit func(user string) // told when a call is refused for spend
}

// MaxBody bounds a chat request.
const MaxBody = 8 << 20

// Register adds the gateway routes to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST "+gatewayapi.Prefix+gatewayapi.ChatPath, h.completions)
	mux.HandleFunc("GET "+gatewayapi.Prefix+gatewayapi.ModelsPath, h.models)
}

func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	if _, status, why := h.Caller(r); status != 0 {
		openai.WriteError(w, status, "authentication_error", "gateway_auth", why)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(openai.NewModelList(h.Provider.List()))
}

func (h *Handler) completions(w http.ResponseWriter, r *http.Request) {
	user, status, why := h.Caller(r)
	if status != 0 {
		openai.WriteError(w, status, "authentication_error", "gateway_auth", why)
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		openai.WriteError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "too_large", fmt.Sprintf("chat requests are limited to %d bytes", MaxBody))
		return
	}
	req, err := openai.DecodeRequest(raw)
	if err != nil {
		openai.WriteError(w, http.StatusBadRequest, "invalid_request_error", "bad_request", "body is not a chat completions request: "+err.Error())
		return
	}
	if req.Model == "" || len(req.Messages) == 0 {
		openai.WriteError(w, http.StatusBadRequest, "invalid_request_error", "bad_request", "model and messages are required")
		return
	}
	if !h.Provider.Known(req.Model) {
		openai.WriteError(w, http.StatusBadRequest, "invalid_request_error", "model_not_found", fmt.Sprintf("model %q is not served here; GET /v1/gateway/models lists them", req.Model))
		return
	}
	settle, ok := h.reserve(w, r, user, &req)
	if !ok {
		return
	}
	usage, err := h.Provider.Serve(r.Context(), w, req)
	if err != nil {
		h.Log.Warn("gateway: provider failed", "user", user, "model", req.Model, "err", err)
	}
	h.account(user, req.Model, usage, settle)
}

// accountFor is how long account keeps trying the ledger and the usage
// count while Postgres does not answer (a restart takes about 12 s).
const accountFor = time.Minute

// account settles the call's reservation, then counts its usage, so the
// ledger and the count agree. Both are tried once at once; a write that
// fails (Postgres restarting) is tried again in the background, backing
// off, for up to accountFor, before the next one: the chaos soak caught a
// call counted while its reservation stayed open, because the settle
// failed during a restart and the count a moment later did not.
func (h *Handler) account(user, model string, usage openai.ChatUsage, settle func(openai.ChatUsage) error) {
	record := func() error {
		if usage.PromptTokens+usage.CompletionTokens == 0 || h.Usage == nil {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return h.Usage.RecordUsage(ctx, user, model, usage.PromptTokens, usage.CompletionTokens)
	}
	steps := []func() error{func() error { return settle(usage) }, record}
	for i, step := range steps {
		if err := step(); err != nil {
			h.Log.Warn("gateway: spend or usage not written; trying again", "user", user, "model", model, "err", err)
			go h.retry(user, steps[i:])
			return
		}
	}
}

// retry runs steps in order, each again until it succeeds or accountFor
// has passed since the first try.
func (h *Handler) retry(user string, steps []func() error) {
	deadline := time.Now().Add(accountFor)
	wait := 250 * time.Millisecond
	for _, step := range steps {
		for {
			time.Sleep(wait) // a back-off between tries of a write, not a synchronisation
			err := step()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				h.Log.Error("gateway: spend or usage not written; the ledger and the count disagree", "user", user, "err", err)
				return
			}
			wait = min(2*wait, 4*time.Second)
		}
	}
}

// reserve charges req's worst case to user before the call, or answers the
// refusal itself (ok false). A request that names no output bound gets the
// one it was charged for, so the worst case holds upstream too. settle
// records what the call did cost; a call that reported no usage (a stream
// cut short, a provider that sends none) keeps its worst case, since the
// provider may bill it anyway.
func (h *Handler) reserve(w http.ResponseWriter, r *http.Request, user string, req *openai.ChatRequest) (settle func(openai.ChatUsage) error, ok bool) {
	none := func(openai.ChatUsage) error { return nil }
	if h.Ledger == nil {
		return none, true
	}
	price, priced := h.Prices[req.Model]
	if !priced {
		if h.Free[req.Model] {
			return none, true
		}
		openai.WriteError(w, http.StatusBadRequest, "invalid_request_error", "unpriced_model",
			fmt.Sprintf("model %q has no price here, so it cannot be used (the operator sets AFFIDO_MODEL_PRICES or marks it free)", req.Model))
		return none, false
	}
	in, out := spend.Estimate(*req)
	if req.MaxTokens == nil && req.MaxCompletionTokens == nil {
		req.MaxTokens = &out
	}
	worst := spend.Cost(price, in, out)
	id, err := h.Ledger.Reserve(r.Context(), user, req.Model, worst, h.Limits)
	switch {
	case errors.Is(err, spend.ErrLimit):
		if h.OnLimit != nil {
			h.OnLimit(user)
		}
		openai.WriteError(w, http.StatusPaymentRequired, "insufficient_quota", openai.CodeSpendLimit, err.Error())
		return none, false
	case err != nil:
		h.Log.Warn("gateway: spend not reserved", "user", user, "err", err)
		w.Header().Set("Retry-After", "2")
		openai.WriteError(w, http.StatusServiceUnavailable, "server_error", "unavailable", "the spend ledger is unavailable")
		return none, false
	}
	return func(u openai.ChatUsage) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cost := worst
		if u.PromptTokens+u.CompletionTokens > 0 {
			cost = spend.Cost(price, u.PromptTokens, u.CompletionTokens)
		}
		err := h.Ledger.Settle(ctx, id, cost)
		if errors.Is(err, spend.ErrNotOpen) { // an earlier try's, whose answer was lost
			return nil
		}
		return err
	}, true
}

// OpenRouter forwards requests to an OpenAI-compatible provider, adding the
// key the manager holds. Nothing from the sandbox's credentials goes upstream.
type OpenRouter struct {
	URL    string   // base URL, e.g. https://openrouter.ai/api/v1
	Key    string   // the provider key; never sent to a sandbox
	Allow  []string // models allowed; empty allows any "vendor/model" name
	Client *http.Client
}

// Known reports whether model may be requested.
func (o *OpenRouter) Known(model string) bool {
	if len(o.Allow) == 0 {
		return strings.Contains(model, "/") && !strings.ContainsAny(model, " \t\n")
	}
	for _, m := range o.Allow {
		if m == model {
			return true
		}
	}
	return false
}

// List returns the allowed models.
func (o *OpenRouter) List() []string { return o.Allow }

// Serve sends the validated request upstream, re-encoded, and streams the
// answer back, reading the usage chunk as it passes.
func (o *OpenRouter) Serve(ctx context.Context, w http.ResponseWriter, req openai.ChatRequest) (openai.ChatUsage, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return openai.ChatUsage{}, err
	}
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(o.URL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return openai.ChatUsage{}, err
	}
	up.Header.Set("Content-Type", "application/json")
	up.Header.Set("Authorization", "Bearer "+o.Key)
	client := o.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Minute}
	}
	resp, err := client.Do(up)
	if err != nil {
		w.Header().Set("Retry-After", "2")
		openai.WriteError(w, http.StatusBadGateway, "server_error", "upstream_unavailable", "the model provider could not be reached")
		return openai.ChatUsage{}, err
	}
	defer resp.Body.Close()
	for _, k := range []string{"Content-Type", "Retry-After"} {
		if v := resp.Header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	var usage openai.ChatUsage
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadBytes('\n')
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return usage, werr
			}
			if fl != nil && bytes.Equal(bytes.TrimSpace(line), nil) {
				fl.Flush()
			}
			readUsage(line, &usage)
		}
		if errors.Is(err, io.EOF) {
			if fl != nil {
				fl.Flush()
			}
			return usage, nil
		}
		if err != nil {
			return usage, err
		}
	}
}

// readUsage picks the usage object out of an SSE data line or a JSON body.
func readUsage(line []byte, u *openai.ChatUsage) {
	line = bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(line), []byte("data:")))
	if !bytes.Contains(line, []byte(`"usage"`)) {
		return
	}
	var c struct {
		Usage *openai.ChatUsage `json:"usage"`
	}
	if json.Unmarshal(line, &c) == nil && c.Usage != nil {
		*u = *c.Usage
	}
}
