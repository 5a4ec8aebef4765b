package markdown

import (
	"regexp"

	"github.com/microcosm-cc/bluemonday"
)

// policy is bluemonday's UGCPolicy narrowed to what goldmark makes of
// markdown here. It is built from an empty policy because bluemonday can
// only add allowances: UGCPolicy's images, its global id, lang, dir and
// title (a link's title is hover text the model chose; without it, a link
// whose URL is refused keeps no attribute and is dropped), and its elements
// markdown never makes (details, figure, area, …) are left out.
// goldmark never passes raw HTML through, so this is the second wall: it
// must hold even against HTML written by hand (policy_test.go).
var policy = newPolicy()

// The attribute shapes the policy allows; each must match the whole value.
var (
	// external is an http or https link with a host and no user info
	// (https://bank.example@evil.example/ reads as the bank's), or a
	// mailto link; the URL check then allows only these schemes.
	external = regexp.MustCompile(`^(?i:https?://[^/?#\\@\s]+(?:[/?#]|$)|mailto:)`)
	// citeHref, citeClass and citeID are a citation's link. bluemonday
	// judges each attribute alone, so that the three come together, with
	// one id, is renderCite's doing (assertCiteShape checks the output).
	citeHref     = regexp.MustCompile(`^#cite-[A-Za-z0-9_-]{1,40}$`)
	citeClass    = regexp.MustCompile(`^cite$`)
	citeID       = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)
	languageName = regexp.MustCompile(`^language-[a-zA-Z0-9_+-]{1,32}$`)
	listStart    = regexp.MustCompile(`^[0-9]{1,9}$`)
	cellAlign    = regexp.MustCompile(`^(left|center|right)$`)
)

func newPolicy() *bluemonday.Policy {
	p := bluemonday.NewPolicy()
	p.RequireParseableURLs(true)
	p.AllowURLSchemes("http", "https", "mailto")
	// A relative URL passes the URL check, but only #cite-ID passes the
	// href pattern: a link into this origin (/auth/…, /u/…) never does.
	p.AllowRelativeURLs(true)
	// A link with a host (http, https) gets rel="nofollow noreferrer
	// noopener" and target="_blank"; rel and target from the source are
	// not allowed, so these are the only ones.
	p.RequireNoFollowOnFullyQualifiedLinks(true)
	p.RequireNoReferrerOnFullyQualifiedLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true)

	p.AllowElements("p", "br", "hr", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6",
		"ul", "ol", "li", "pre", "code", "em", "strong", "del",
		"table", "thead", "tbody", "tr", "th", "td")
	p.AllowAttrs("href").Matching(external).OnElements("a")
	p.AllowAttrs("href").Matching(citeHref).OnElements("a")
	p.AllowAttrs("class").Matching(citeClass).OnElements("a")
	p.AllowAttrs("data-cite").Matching(citeID).OnElements("a")
	p.AllowAttrs("class").Matching(languageName).OnElements("code")
	p.AllowAttrs("start").Matching(listStart).OnElements("ol")
	p.AllowAttrs("align").Matching(cellAlign).OnElements("th", "td")
	return p
}
