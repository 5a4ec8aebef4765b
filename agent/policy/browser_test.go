package policy

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/affido/affido/agent/durable"
)

// The browser's tools as the policy sees them (agent/tools.BrowserTools
// sets the same flags).
var (
	bOpen   = durable.Tool{Name: "browser_open", Parameters: durable.Schema(`"url":{"type":"string"}`, "url")}
	bClick  = durable.Tool{Name: "browser_click", ActsOnPage: true, Parameters: durable.Schema(`"url":{"type":"string"},"selector":{"type":"string"}`, "url")}
	bUpload = durable.Tool{Name: "browser_upload", AlwaysAsk: true, Parameters: durable.Schema(`"url":{"type":"string"},"path":{"type":"string"}`, "url", "path")}
	bFetch  = durable.Tool{Name: "fetch_url", Parameters: durable.Schema(`"url":{"type":"string"}`, "url")}
)

func judge(t *testing.T, store *durable.Store, book *Book, rules []Rule, tool durable.Tool, args string, outside bool) durable.Verdict {
	t.Helper()
	raw, _ := json.Marshal(rules)
	if err := store.SetSetting(context.Background(), rulesKey, string(raw)); err != nil {
		t.Fatal(err)
	}
	q := durable.PolicyQuery{Tool: tool, Call: durable.ToolCall{Name: tool.Name, Arguments: json.RawMessage(args)}, Store: store}
	if outside {
		q.Outside = &durable.Entry{ID: 5, Kind: durable.OutsideText}
	}
	v, err := book.Check(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Clicking asks once a page's text is in the context (the page may be
// steering the model), unless the owner allowed acting on that very site;
// a rule for another site, or one for opening pages, does not let it act.
func TestBrowserActsAskAfterReadingUnlessTheSiteIsAllowed(t *testing.T) {
	store := openStore(t)
	book := &Book{Tools: []durable.Tool{bOpen, bClick, bUpload, bFetch}}
	click := `{"url":"https://shop.example/cart","selector":"#buy"}`
	actOnShop := Rule{ID: 1, Tool: "browser_click", Effect: durable.Allow, When: Conditions{Host: "shop.example"}}
	actOnOther := Rule{ID: 2, Tool: "browser_click", Effect: durable.Allow, When: Conditions{Host: "other.example"}}
	openShop := Rule{ID: 3, Tool: "browser_open", Effect: durable.Allow, When: Conditions{Host: "shop.example"}}
	cases := []struct {
		name    string
		rules   []Rule
		outside bool
		want    durable.Effect
	}{
		{"no page read yet", nil, false, durable.Allow},
		{"a page read: the attack (injected text makes it click)", nil, true, durable.Ask},
		{"a page read, the owner lets it act on this site", []Rule{actOnShop}, true, durable.Allow},
		{"a page read, a rule for another site", []Rule{actOnOther}, true, durable.Ask},
		{"a page read, a rule to open this site's pages", []Rule{openShop}, true, durable.Ask},
		{"a deny for this site wins before any reading", []Rule{actOnShop, {ID: 4, Tool: "browser_click", Effect: durable.Deny, When: Conditions{Host: "shop.example"}}}, false, durable.Deny},
		{"an unconditional allow does not beat outside text", []Rule{{ID: 5, Tool: "browser_click", Effect: durable.Allow}}, true, durable.Ask},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if v := judge(t, store, book, c.rules, bClick, click, c.outside); v.Effect != c.want {
				t.Fatalf("%+v, want %s", v, c.want)
			}
		})
	}
}

// An upload always asks: no rule for the site, and no rule at all, lets a
// page take a workspace file without the owner.
func TestBrowserUploadAlwaysAsks(t *testing.T) {
	store := openStore(t)
	book := &Book{Tools: []durable.Tool{bOpen, bClick, bUpload, bFetch}}
	up := `{"url":"https://shop.example/form","path":"secret.txt"}`
	// The attack: a rule stored for the upload (as if one got in).
	stored := []Rule{{ID: 1, Tool: "browser_upload", Effect: durable.Allow}, {ID: 2, Tool: "browser_click", Effect: durable.Allow, When: Conditions{Host: "shop.example"}}}
	if v := judge(t, store, book, stored, bUpload, up, false); v.Effect != durable.Ask {
		t.Fatalf("upload with an allow rule: %+v", v)
	}
	if v := judge(t, store, book, nil, bUpload, up, false); v.Effect != durable.Ask || !strings.Contains(v.Reason, "always asks") {
		t.Fatalf("upload without a rule: %+v", v)
	}
	if _, err := book.ruleOf(Request{Tool: "browser_upload", Effect: durable.Allow, When: map[string]string{"host": "shop.example"}}); err == nil {
		t.Fatal("a host condition on browser_upload was accepted")
	}
	if _, err := book.Proposal(durable.Approval{Tool: "browser_upload", Arguments: json.RawMessage(up)}); !errors.Is(err, ErrNoProposal) {
		t.Fatalf("allow always on an upload: %v", err)
	}
}

// A take-over always asks, in its own words (the owner's decision is the
// hand-back): a stored allow rule changes nothing, "allow always" is not
// offered.
func TestBrowserTakeOverAlwaysAsks(t *testing.T) {
	store := openStore(t)
	take := durable.Tool{Name: "browser_take_over", AlwaysAsk: true, AskReason: "the agent asks you to take over its browser tab",
		Parameters: durable.Schema(`"url":{"type":"string"},"reason":{"type":"string"}`, "url", "reason")}
	book := &Book{Tools: []durable.Tool{bOpen, take}}
	args := `{"url":"https://shop.example/login","reason":"sign in"}`
	stored := []Rule{{ID: 1, Tool: "browser_take_over", Effect: durable.Allow}}
	for _, rules := range [][]Rule{stored, nil} {
		if v := judge(t, store, book, rules, take, args, false); v.Effect != durable.Ask || v.Reason != take.AskReason {
			t.Fatalf("take over with rules %v: %+v", rules, v)
		}
	}
	if _, err := book.Proposal(durable.Approval{Tool: "browser_take_over", Arguments: json.RawMessage(args)}); !errors.Is(err, ErrNoProposal) {
		t.Fatalf("allow always on a take-over: %v", err)
	}
}

// browser_open asks for a host no rule names, and shares the site rules of
// fetch_url: the owner's host rule on either covers both, and its words
// say so; an unconditional rule on one covers only that one.
func TestBrowserOpenSharesSiteRulesWithFetch(t *testing.T) {
	store := openStore(t)
	book := &Book{Tools: []durable.Tool{bOpen, bClick, bUpload, bFetch}}
	open := `{"url":"https://news.example/today"}`
	if v := judge(t, store, book, nil, bOpen, open, false); v.Effect != durable.Ask {
		t.Fatalf("a new host: %+v", v)
	}
	fetchRule := Rule{ID: 1, Tool: "fetch_url", Effect: durable.Allow, When: Conditions{Host: "news.example"}}
	if v := judge(t, store, book, []Rule{fetchRule}, bOpen, open, false); v.Effect != durable.Allow {
		t.Fatalf("fetch_url's site rule: %+v", v)
	}
	if !strings.Contains(fetchRule.Describe(), "fetch_url and browser_open") {
		t.Fatalf("the words hide what the rule covers: %s", fetchRule.Describe())
	}
	if v := judge(t, store, book, []Rule{fetchRule}, bOpen, `{"url":"https://evil.example/"}`, false); v.Effect != durable.Ask {
		t.Fatalf("another host: %+v", v)
	}
	// "Allow always" on an opened page proposes its host, which fetch_url shares.
	p, err := book.Proposal(durable.Approval{Tool: "browser_open", Arguments: json.RawMessage(open)})
	if err != nil || p.When.Host != "news.example" {
		t.Fatalf("proposal: %+v %v", p, err)
	}
	p.ID = 2
	if v := judge(t, store, book, []Rule{p}, bFetch, open, false); v.Effect != durable.Allow {
		t.Fatalf("fetch_url under browser_open's rule: %+v", v)
	}
	all := Rule{ID: 3, Tool: "fetch_url", Effect: durable.Allow}
	if v := judge(t, store, book, []Rule{all}, bOpen, open, false); v.Effect != durable.Ask {
		t.Fatalf("an unconditional fetch_url rule opened pages: %+v", v)
	}
	// Opening is not read-only: with a page's text in the context it asks.
	if v := judge(t, store, book, []Rule{fetchRule}, bOpen, open, true); v.Effect != durable.Ask {
		t.Fatalf("open after reading: %+v", v)
	}
}
