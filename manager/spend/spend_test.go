package spend

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/affido/affido/internal/openai"
)

func TestParsePrices(t *testing.T) {
	p, err := ParsePrices(" fake/echo=1:2, vendor/model=0.15:0.6 ")
	if err != nil || p["fake/echo"] != (Price{1, 2}) || p["vendor/model"] != (Price{0.15, 0.6}) || len(p) != 2 {
		t.Fatalf("%v %v", p, err)
	}
	for _, bad := range []string{"x", "x=1", "=1:2", "x=a:2", "x=1:-2", "x=1:Inf"} {
		if _, err := ParsePrices(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCostRoundsUpInMicroDollars(t *testing.T) {
	if c := Cost(Price{Input: 1, Output: 2}, 10, 1000); c != 2010 {
		t.Fatalf("cost %d, want 2010", c)
	}
	if c := Cost(Price{Input: 0.15, Output: 0.6}, 1, 1); c != 1 { // 0.75 micro-dollars rounds up
		t.Fatalf("cost %d, want 1", c)
	}
	if USD(0.0063) != 6300 {
		t.Fatal("USD")
	}
}

func TestEstimateBoundsTheCall(t *testing.T) {
	max := int64(50)
	req := openai.ChatRequest{Model: "m", Messages: []openai.ChatMessage{{Role: "user", Content: "0123456789abcdef"}}, MaxTokens: &max}
	in, out := Estimate(req)
	if in != (4+16+16+3)/4 || out != 50 {
		t.Fatalf("in %d out %d", in, out)
	}
	req.MaxTokens = nil
	if _, out := Estimate(req); out != DefaultMaxOutput {
		t.Fatalf("no max_tokens: out %d", out)
	}
}

// 20 concurrent reservations against a limit that fits 3: exactly 3 pass.
func TestConcurrentReservationsNeverPassTheLimit(t *testing.T) {
	m := &Memory{}
	lim := Limits{Daily: 3*2010 + 100, Monthly: 1 << 40}
	results := make(chan error, 20)
	for range 20 {
		go func() {
			_, err := m.Reserve(context.Background(), "u", "fake/echo", 2010, lim)
			results <- err
		}()
	}
	ok := 0
	for range 20 {
		err := <-results
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrLimit):
			t.Fatalf("unexpected error %v", err)
		}
	}
	if ok != 3 || m.Spent("u") != 3*2010 {
		t.Fatalf("%d reservations passed, %d reserved; want 3", ok, m.Spent("u"))
	}
	// Settling for less makes room; another user is unaffected.
	if err := m.Settle(context.Background(), 1, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve(context.Background(), "u", "fake/echo", 2010, lim); err != nil {
		t.Fatalf("after settling lower: %v", err)
	}
	if _, err := m.Reserve(context.Background(), "other", "fake/echo", 2010, lim); err != nil {
		t.Fatalf("another user: %v", err)
	}
	// Allowing another day doubles today's limit.
	m.Raised = map[string]bool{"u": true}
	if _, err := m.Reserve(context.Background(), "u", "fake/echo", 2010, lim); err != nil {
		t.Fatalf("after another day: %v", err)
	}
}

// A refusal says which limit, what is spent and the call's worst case, in
// dollars; it is ErrLimit to errors.Is. Tried: the daily limit, then the
// monthly one with the day still free, and a call that fits.
func TestLimitErrorsSayWhichAndWhy(t *testing.T) {
	lim := Limits{Daily: USD(1), Monthly: USD(10)}
	err := CheckLimits(USD(0.9), USD(2), USD(0.25), lim)
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrLimit) || le.Period != "daily" {
		t.Fatalf("daily: %v", err)
	}
	for _, want := range []string{"daily limit is $1.0000", "$0.9000 of it is spent", "up to $0.2500", "worst case"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if err := CheckLimits(USD(0.1), USD(9.9), USD(0.25), lim); !errors.As(err, &le) || le.Period != "monthly" || le.Spent != USD(9.9) {
		t.Fatalf("monthly: %v", err)
	}
	if err := CheckLimits(USD(0.1), USD(1), USD(0.25), lim); err != nil {
		t.Fatalf("a call within both limits: %v", err)
	}
}
