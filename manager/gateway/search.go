package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/scripted"
)

// Searcher is a web search provider. Its key, if any, stays in the
// manager: a sandbox only ever sees the hits.
type Searcher interface {
	// Name names the provider in results and logs.
	Name() string
	// Search returns at most count hits for query.
	Search(ctx context.Context, query string, count int) ([]gatewayapi.SearchHit, error)
}

// ScriptedSearch answers every query with the same hits (package
// scripted): the provider of the tests and the dev stack, which reach no
// search engine.
type ScriptedSearch struct{}

var _ Searcher = ScriptedSearch{}

// Name is "scripted".
func (ScriptedSearch) Name() string { return scripted.SearchProvider }

// Search returns the fixed hits.
func (ScriptedSearch) Search(_ context.Context, query string, count int) ([]gatewayapi.SearchHit, error) {
	return scripted.Search(query, count), nil
}

// BraveSearch is the Brave Search API (GET …/res/v1/web/search, key in
// the X-Subscription-Token header), configured by URL and key.
type BraveSearch struct {
	URL    string // default https://api.search.brave.com/res/v1/web/search
	Key    string
	Client *http.Client
}

var _ Searcher = (*BraveSearch)(nil)

// Name is "brave".
func (b *BraveSearch) Name() string { return "brave" }

// Search asks the API.
func (b *BraveSearch) Search(ctx context.Context, query string, count int) ([]gatewayapi.SearchHit, error) {
	base := b.URL
	if base == "" {
		base = "https://api.search.brave.com/res/v1/web/search"
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("search URL: %w", err)
	}
	q := u.Query()
	q.Set("q", query)
	q.Set("count", strconv.Itoa(count))
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Subscription-Token", b.Key)
	client := b.Client
	if client == nil {
		client = &http.Client{Timeout: 15 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("search: the provider answered %s", resp.Status)
	}
	var body struct {
		Web struct {
			Results []struct {
				Title       string `json:"title"`
				URL         string `json:"url"`
				Description string `json:"description"`
			} `json:"results"`
		} `json:"web"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("search: decode the answer: %w", err)
	}
	hits := []gatewayapi.SearchHit{}
	for _, r := range body.Web.Results {
		hits = append(hits, gatewayapi.SearchHit{Title: r.Title, URL: r.URL, Snippet: r.Description})
	}
	return hits, nil
}
