package markdown

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

type renderCase struct {
	name   string // what was tried, and what must come of it
	src    string
	text   string   // the reader sees this text (from the parsed output)
	want   []string // the output HTML has each of these
	absent []string // and none of these
}

var renderCases = []renderCase{
	// HTML written by the model is shown as text, never markup.
	{name: "a script element is shown as text", src: "<script>alert(1)</script>",
		text: "<script>alert(1)</script>", want: []string{"&lt;script&gt;"}},
	{name: "an img with onerror is shown as text", src: "see <img src=x onerror=alert(1)> here",
		text: "see <img src=x onerror=alert(1)> here"},
	{name: "an svg with onload is shown as text", src: "<svg onload=alert(1)>",
		text: "<svg onload=alert(1)>"},
	{name: "an a with a style attribute is shown as text", src: `<a href="x" style="color:red">hi</a>`,
		text: `<a href="x" style="color:red">hi</a>`},
	{name: "an iframe is shown as text", src: `<iframe src="https://evil.example/"></iframe>`,
		text: `<iframe src="https://evil.example/"></iframe>`},
	{name: "an HTML block is one paragraph of text, the markdown in it unparsed", src: "<div onclick=\"alert(1)\">\n*hello*\n</div>\n\nafter",
		text: "<div onclick=\"alert(1)\">\n*hello*\n</div>", want: []string{"<p>&lt;div onclick=", "<p>after</p>"}, absent: []string{"<em>"}},
	{name: "raw inline HTML with an event attribute is shown as text", src: "a <b onclick=x>bold</b> word",
		text: "a <b onclick=x>bold</b> word", absent: []string{"<b>"}},
	{name: "an HTML comment is shown as text", src: "<!-- hidden -->", text: "<!-- hidden -->"},

	// Links: only http, https and mailto.
	{name: "a javascript: link keeps its text, not the link", src: "[x](javascript:alert(1))",
		text: "x", absent: []string{"<a", "javascript"}},
	{name: "a mixed-case JaVaScRiPt: link", src: "[x](JaVaScRiPt:alert(1))",
		text: "x", absent: []string{"<a", "alert"}},
	{name: "an entity-encoded javascript: link", src: "[x](&#106;avascript:alert(1))",
		text: "x", absent: []string{"<a", "alert"}},
	{name: "a javascript: link by reference", src: "[x][r]\n\n[r]: javascript:alert(1)",
		text: "x", absent: []string{"<a", "alert"}},
	{name: "a javascript: autolink is shown as text", src: "<javascript:alert(1)>",
		text: "javascript:alert(1)", absent: []string{"<a"}},
	{name: "a data:text/html link", src: "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
		text: "x", absent: []string{"<a", "data:"}},
	{name: "a link into this origin is dropped", src: "[sign out](/auth/sign-out)",
		text: "sign out", absent: []string{"<a", "/auth"}},
	{name: "a protocol-relative link is dropped", src: "[x](//evil.example/x)",
		text: "x", absent: []string{"<a", "evil"}},
	{name: "an https link is kept, opening apart without referrer, without its title", src: `[x](https://ok.example/a "the title")`,
		want: []string{`href="https://ok.example/a"`, `target="_blank"`, `rel="`}, absent: []string{"title"}},
	{name: "a refused link with a title is dropped, title and all", src: `[x](/auth/sign-out "t")`,
		text: "x", absent: []string{"<a", "title"}},
	{name: "an http link without a host is dropped", src: "[0](http://)",
		text: "0", absent: []string{"<a"}},
	{name: "a link with user info (the bank's name before an @) is dropped", src: "[bank](https://bank.example@evil.example/)",
		text: "bank", absent: []string{"<a", "evil"}},
	{name: "a quote in a URL cannot end the attribute", src: `[x](https://ok.example/"onmouseover=alert(1))`,
		want: []string{`href="https://ok.example/%22onmouseover=alert(1)"`}},
	{name: "a mailto link is kept", src: "[mail](mailto:a@example.com)",
		want: []string{`<a href="mailto:a@example.com">mail</a>`}},
	{name: "a bare URL and a www. name are linkified", src: "see https://example.com/x and www.example.org",
		want: []string{`<a href="https://example.com/x"`, `<a href="http://www.example.org"`}},

	// Images are their alt text.
	{name: "an image becomes its alt text", src: "![img](http://evil/x.png)",
		text: "img", want: []string{"<p>img</p>"}, absent: []string{"evil"}},
	{name: "an image without alt text becomes nothing", src: "![](http://evil/x.png)",
		absent: []string{"evil", "png"}},
	{name: "an image in a link (a badge) leaves the link around its alt text", src: "[![build](http://evil/b.svg)](https://ci.example/)",
		want: []string{`href="https://ci.example/"`, ">build</a>"}, absent: []string{"evil"}},

	// Markdown itself.
	{name: "a go fence keeps its language, its content escaped", src: "```go\nif a < b { println(\"<b>\") }\n```",
		text: `if a < b { println("<b>") }`, want: []string{`<pre><code class="language-go">`, "&lt;b&gt;"}},
	{name: "a fence language that tries to leave the class attribute loses the class", src: "```go\" onmouseover=\"alert(1)\nx\n```",
		want: []string{"<pre><code>x"}},
	{name: "a GFM table with alignment", src: "| a | b |\n|:--|--:|\n| 1 | 2 |",
		want: []string{"<table>", `<th align="left">a</th>`, `<td align="right">2</td>`}, absent: []string{"style"}},
	{name: "strikethrough", src: "~~strike~~", want: []string{"<del>strike</del>"}},
	{name: "a task list shows its boxes as characters, no form", src: "- [x] done\n- [ ] todo",
		want: []string{"<li>☑ done</li>", "<li>☐ todo</li>"}, absent: []string{"<input"}},
	{name: "a heading gets no id", src: "# Title", want: []string{"<h1>Title</h1>"}},
	{name: "an ordered list keeps its start", src: "3. c\n4. d", want: []string{`<ol start="3">`}},

	// Citations.
	{name: "a citation marker becomes its link", src: "Dogs dream too. [cite:c163]",
		want: []string{`<a class="cite" data-cite="c163" href="#cite-c163">[c163]</a>`}},
	{name: "a citation marker in a code span stays literal", src: "write `[cite:c163]` after the line",
		want: []string{"<code>[cite:c163]</code>"}, absent: []string{"<a"}},
	{name: "a citation marker in a code block stays literal", src: "```\n[cite:c163]\n```",
		want: []string{"<pre><code>[cite:c163]\n</code></pre>"}, absent: []string{"<a"}},
	{name: "a citation with a bad id stays text", src: "[cite:<b>]",
		text: "[cite:<b>]", absent: []string{"<a", "<b>"}},
	{name: "a citation id over 40 characters stays text", src: "[cite:" + strings.Repeat("a", 41) + "]",
		text: "[cite:" + strings.Repeat("a", 41) + "]", absent: []string{"<a"}},
	{name: "a citation in a link's text does not nest a second link", src: "[see [cite:c1]](https://x.example/)",
		want: []string{">see [cite:c1]</a>"}, absent: []string{`class="cite"`}},
}

func TestRender(t *testing.T) {
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // Render is called from concurrent requests
			out := Render(c.src)
			nodes := assertInert(t, out)
			assertCiteShape(t, nodes)
			if c.text != "" && !strings.Contains(textOf(nodes), c.text) {
				t.Errorf("the reader does not see %q in %q", c.text, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in %q", w, out)
				}
			}
			for _, a := range c.absent {
				if strings.Contains(out, a) {
					t.Errorf("%q in %q", a, out)
				}
			}
		})
	}
}

// Input over MaxInput is cut at a whole character and says so; input of
// exactly MaxInput is not.
func TestRenderCapsInput(t *testing.T) {
	whole := Render(strings.Repeat("a", MaxInput))
	if strings.Contains(whole, "truncated") {
		t.Fatalf("%d bytes were said to be cut", MaxInput)
	}
	// é is 2 bytes: the first at MaxInput-1, the second past the cap.
	out := Render(strings.Repeat("a", MaxInput-1) + "é" + "TAIL")
	assertInert(t, out)
	if !utf8.ValidString(out) || strings.Contains(out, "é") || strings.Contains(out, "TAIL") {
		t.Fatalf("cut mid-character or past the cap: ...%q", out[max(0, len(out)-200):])
	}
	if !strings.HasSuffix(out, "KiB are shown.</p>\n") || !strings.Contains(out, `<p class="truncated">`) {
		t.Fatalf("no truncation note: ...%q", out[max(0, len(out)-200):])
	}
}

// The output holds the invariants whatever the markdown; the seeds are the
// cases above (go test -fuzz FuzzRender searches further).
func FuzzRender(f *testing.F) {
	for _, c := range renderCases {
		f.Add(c.src)
	}
	f.Fuzz(func(t *testing.T, src string) {
		assertCiteShape(t, assertInert(t, Render(src)))
	})
}

// allowedAttrs is every element the output may hold and the attributes
// each may carry: the sanitizer's allowlist, plus rel and target it adds and
// the truncation note's class. Anything else (script, iframe, img, svg,
// style, input, …) fails.
var allowedAttrs = map[atom.Atom][]string{
	atom.P: {"class"}, atom.Br: nil, atom.Hr: nil, atom.Blockquote: nil,
	atom.H1: nil, atom.H2: nil, atom.H3: nil, atom.H4: nil, atom.H5: nil, atom.H6: nil,
	atom.Ul: nil, atom.Ol: {"start"}, atom.Li: nil, atom.Pre: nil, atom.Code: {"class"},
	atom.Em: nil, atom.Strong: nil, atom.Del: nil,
	atom.Table: nil, atom.Thead: nil, atom.Tbody: nil, atom.Tr: nil, atom.Th: {"align"}, atom.Td: {"align"},
	atom.A: {"href", "class", "data-cite", "rel", "target"},
}

// assertInert parses out as a browser would and fails t on anything that
// could run or load: an element or attribute outside allowedAttrs, any
// attribute starting with "on", a style or id, a link other than http,
// https, mailto or #cite-ID, an http(s) link without target=_blank and rel
// nofollow, noopener and noreferrer, a class other than language-X on code,
// cite on a and truncated on p, or a comment. It returns the parsed nodes.
func assertInert(t *testing.T, out string) []*html.Node {
	t.Helper()
	nodes, err := html.ParseFragment(strings.NewReader(out), &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div})
	if err != nil {
		t.Fatalf("parse %q: %v", out, err)
	}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		switch n.Type {
		case html.CommentNode:
			t.Errorf("a comment %q in %q", n.Data, out)
		case html.ElementNode:
			allowed, ok := allowedAttrs[n.DataAtom]
			if !ok {
				t.Errorf("element <%s> in %q", n.Data, out)
			}
			for _, a := range n.Attr {
				key := strings.ToLower(a.Key)
				if strings.HasPrefix(key, "on") || key == "style" || key == "id" || key == "src" || !slices.Contains(allowed, key) {
					t.Errorf("attribute %s=%q on <%s> in %q", a.Key, a.Val, n.Data, out)
				}
				if key == "class" && !classAllowed(n.DataAtom, a.Val) {
					t.Errorf("class %q on <%s> in %q", a.Val, n.Data, out)
				}
			}
			if n.DataAtom == atom.A {
				assertLink(t, n, out)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	return nodes
}

func assertLink(t *testing.T, n *html.Node, out string) {
	t.Helper()
	href, ok := attr(n, "href")
	lower := strings.ToLower(strings.TrimSpace(href))
	external := strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://")
	switch {
	case !ok:
		t.Errorf("a link without href in %q", out)
	case external:
		rel, _ := attr(n, "rel")
		tokens := strings.Fields(rel)
		if target, _ := attr(n, "target"); target != "_blank" || !slices.Contains(tokens, "nofollow") || !slices.Contains(tokens, "noopener") || !slices.Contains(tokens, "noreferrer") {
			t.Errorf("link %q opens with target %q, rel %q in %q", href, target, rel, out)
		}
	case strings.HasPrefix(lower, "mailto:"), citeHref.MatchString(href):
	default:
		t.Errorf("link to %q in %q", href, out)
	}
}

// assertCiteShape fails t on a link that carries a citation's class or
// data-cite without being exactly <a class="cite" data-cite="ID"
// href="#cite-ID">[ID]</a>.
func assertCiteShape(t *testing.T, nodes []*html.Node) {
	t.Helper()
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.DataAtom == atom.A {
			class, hasClass := attr(n, "class")
			id, hasID := attr(n, "data-cite")
			href, _ := attr(n, "href")
			isCite := hasClass || hasID || strings.HasPrefix(href, "#")
			if isCite && (class != "cite" || !citeID.MatchString(id) || href != "#cite-"+id || len(n.Attr) != 3 || textOf([]*html.Node{n}) != "["+id+"]") {
				t.Errorf("a citation link of the wrong shape: %+v", n.Attr)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
}

func classAllowed(a atom.Atom, class string) bool {
	switch a {
	case atom.Code:
		return languageName.MatchString(class)
	case atom.A:
		return class == "cite"
	case atom.P:
		return class == "truncated"
	}
	return false
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// textOf is the text a reader sees in nodes.
func textOf(nodes []*html.Node) string {
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	return b.String()
}
