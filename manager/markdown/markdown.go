// Package markdown renders the model's replies as HTML for the web client,
// on the manager, so that no HTML the model writes ever runs.
//
// Render parses CommonMark with the GFM extensions (tables, strikethrough,
// linkify, task lists) and citation markers ([cite:ID]) with goldmark, then
// passes the result through a bluemonday allowlist. goldmark never runs
// with WithUnsafe, and this package renders what is not markdown as text:
//
//   - raw HTML, inline or as a block, is written as escaped text, so the
//     reader sees what the model wrote (a block becomes a paragraph);
//   - an image becomes its alt text (nothing when it has none): the page's
//     CSP blocks outside images anyway, and a picture the model chose could
//     track the reader;
//   - a task list's checkbox becomes ☐ or ☑ (no form elements);
//   - [cite:ID], ID of 1 to 40 letters, digits, _ or -, becomes
//     <a class="cite" data-cite="ID" href="#cite-ID">[ID]</a>, except in
//     code and inside a link's text, where it stays as written.
//
// The sanitizer then keeps only the elements markdown makes (p, h1–h6,
// blockquote, hr, br, ul, ol start, li, pre, code, em, strong, del, a,
// table, thead, tbody, tr, th and td with align). Links keep only http and
// https URLs with a host and no user info, mailto URLs, and the citation's
// #cite-ID; http and https links get rel="nofollow noreferrer noopener"
// and target="_blank". The only
// classes are language-X on <code> (a fenced block's language) and "cite"
// on a link; no id, style or event attribute survives.
//
// Input above MaxInput bytes is cut there (at a UTF-8 boundary); the output
// then ends with <p class="truncated">, saying so.
package markdown

import (
	"bytes"
	"fmt"
	"html"
	"unicode/utf8"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/util"
)

// MaxInput is the most of a reply Render renders, in bytes.
const MaxInput = 256 << 10

// converter is goldmark set up as the package comment says; it is safe for
// concurrent use.
var converter = goldmark.New(
	goldmark.WithExtensions(
		extension.NewTable(extension.WithTableCellAlignMethod(extension.TableCellAlignAttribute)),
		extension.Strikethrough,
		extension.Linkify,
		extension.TaskList,
		citations{},
	),
	goldmark.WithRendererOptions(
		// Ahead of goldmark's own renderers (500, 1000), so these win.
		renderer.WithNodeRenderers(util.Prioritized(inertRenderer{}, 100)),
	),
)

// Render returns src, markdown, as sanitized HTML.
func Render(src string) string {
	src, truncated := cut(src, MaxInput)
	var buf bytes.Buffer
	if err := converter.Convert([]byte(src), &buf); err != nil {
		// Writing to a buffer does not fail and no renderer here returns an
		// error; should one, the reader still gets the text, inert.
		return "<p>" + html.EscapeString(src) + "</p>"
	}
	out := policy.Sanitize(buf.String())
	if truncated {
		out += fmt.Sprintf("<p class=\"truncated\">This reply is longer than %d KiB; only its first %d KiB are shown.</p>\n",
			MaxInput>>10, MaxInput>>10)
	}
	return out
}

// cut returns the first max bytes of s, fewer to end on a whole UTF-8
// character, and whether anything was cut.
func cut(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i], true
}
