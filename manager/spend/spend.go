// Package spend is the gateway's cost control: a price per model, the
// worst case a call may cost (reserved before the call, under the user's
// lock, against daily and monthly limits) and what it did cost (settled
// after). Amounts are micro-dollars (1e-6 USD); a price in USD per million
// tokens is exactly micro-dollars per token.
package spend

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/affido/affido/internal/openai"
)

// ErrLimit is returned by a ledger when a reservation would take the user
// past a daily or monthly limit.
var ErrLimit = errors.New("spend limit reached")

// ErrAlreadyRaised is returned when today's limit was raised once already.
var ErrAlreadyRaised = errors.New("today's limit was raised already")

// ErrNotOpen is wrapped by a ledger's Settle when the reservation is not
// open: settled already (an earlier try whose answer was lost), or none.
var ErrNotOpen = errors.New("no open reservation")

// Price is what a model costs, in USD per million tokens.
type Price struct {
	Input, Output float64
}

// WebPrices are what one web call costs, in micro-dollars: a search what
// the provider bills per request, a fetch what the operator charges for it.
type WebPrices struct {
	Search, Fetch int64
}

// Limits are a user's limits in micro-dollars.
type Limits struct {
	Daily, Monthly int64
}

// LimitError is a reservation refused for spend: which limit it would
// pass, what the call could cost at worst and what is spent already, so
// the owner reads why in numbers. It wraps ErrLimit.
type LimitError struct {
	Period  string // "daily" or "monthly"
	Reserve int64  // the call's worst case, micro-dollars
	Spent   int64  // spent and reserved in the period so far
	Limit   int64
	// Call says what Reserve is for, in words ("this fetch_url costs
	// $0.0010"); empty: a model call's worst case.
	Call string
}

func (e *LimitError) Error() string {
	call := e.Call
	if call == "" {
		call = fmt.Sprintf("this call could cost up to %s (its worst case: the whole prompt and max_tokens of output at the model's prices)", Dollars(e.Reserve))
	}
	return fmt.Sprintf("%v: the %s limit is %s and %s of it is spent; %s, which would pass it",
		ErrLimit, e.Period, Dollars(e.Limit), Dollars(e.Spent), call)
}

func (e *LimitError) Unwrap() error { return ErrLimit }

// CheckLimits returns a *LimitError if reserving micros on top of what is
// spent today and this month would pass a limit (the daily one first).
func CheckLimits(today, month, micros int64, lim Limits) error {
	switch {
	case today+micros > lim.Daily:
		return &LimitError{Period: "daily", Reserve: micros, Spent: today, Limit: lim.Daily}
	case month+micros > lim.Monthly:
		return &LimitError{Period: "monthly", Reserve: micros, Spent: month, Limit: lim.Monthly}
	}
	return nil
}

// Dollars writes micro-dollars as dollars, to the cent's hundredth.
func Dollars(micros int64) string { return fmt.Sprintf("$%.4f", float64(micros)/1e6) }

// USD converts dollars to micro-dollars.
func USD(d float64) int64 { return int64(math.Round(d * 1e6)) }

// ParsePrices reads "model=input:output,..." (USD per million tokens).
func ParsePrices(s string) (map[string]Price, error) {
	out := map[string]Price{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		model, pair, ok := strings.Cut(item, "=")
		in, outp, ok2 := strings.Cut(pair, ":")
		if !ok || !ok2 || model == "" {
			return nil, fmt.Errorf("price %q: want model=input:output in USD per million tokens", item)
		}
		pi, err1 := strconv.ParseFloat(in, 64)
		po, err2 := strconv.ParseFloat(outp, 64)
		if err1 != nil || err2 != nil || pi < 0 || po < 0 || math.IsInf(pi, 0) || math.IsInf(po, 0) {
			return nil, fmt.Errorf("price %q: prices are non-negative numbers", item)
		}
		out[model] = Price{Input: pi, Output: po}
	}
	return out, nil
}

// Cost is what in input and out output tokens cost at p, rounded up.
func Cost(p Price, in, out int64) int64 {
	return int64(math.Ceil(float64(in)*p.Input + float64(out)*p.Output))
}

// DefaultMaxOutput is the output a call may produce when it names no
// max_tokens: what its worst case is reserved for.
const DefaultMaxOutput = 4096

// Estimate bounds the tokens of req: its input (4 bytes a token, plus a
// little per message, never less than the provider can count) and its
// output (max_tokens, or DefaultMaxOutput).
func Estimate(req openai.ChatRequest) (in, out int64) {
	var bytes int64
	for _, m := range req.Messages {
		bytes += int64(len(m.Role)+len(m.Content)+len(m.ToolCallID)) + 16
		for _, c := range m.ToolCalls {
			bytes += int64(len(c.ID) + len(c.Function.Name) + len(c.Function.Arguments))
		}
	}
	for _, t := range req.Tools {
		bytes += int64(len(t.Function.Name) + len(t.Function.Description) + len(t.Function.Parameters))
	}
	in = (bytes + 3) / 4
	out = DefaultMaxOutput
	switch {
	case req.MaxCompletionTokens != nil && *req.MaxCompletionTokens > 0:
		out = *req.MaxCompletionTokens
	case req.MaxTokens != nil && *req.MaxTokens > 0:
		out = *req.MaxTokens
	}
	return in, out
}
