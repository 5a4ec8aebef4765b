package markdown

import (
	"regexp"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// citeMarker is a citation marker at the start of the rest of a line; the
// id pattern is agent/citations' (the agent checks the ids, not this).
var citeMarker = regexp.MustCompile(`^\[cite:([A-Za-z0-9_-]{1,40})\]`)

var kindCite = ast.NewNodeKind("Cite")

// citeNode is one [cite:ID] marker.
type citeNode struct {
	ast.BaseInline
	id string
}

func (n *citeNode) Kind() ast.NodeKind { return kindCite }

func (n *citeNode) Dump(source []byte, level int) {
	ast.DumpHelper(n, source, level, map[string]string{"ID": n.id}, nil)
}

// citations is the goldmark extension for [cite:ID] markers. Being an
// inline parser, it never sees code spans or blocks, whose text goldmark
// does not parse for inlines.
type citations struct{}

var _ goldmark.Extender = citations{}

func (citations) Extend(m goldmark.Markdown) {
	// Ahead of the link parser (200), which would take the brackets.
	m.Parser().AddOptions(parser.WithInlineParsers(util.Prioritized(citeParser{}, 150)))
	m.Renderer().AddOptions(renderer.WithNodeRenderers(util.Prioritized(citeRenderer{}, 500)))
}

type citeParser struct{}

var _ parser.InlineParser = citeParser{}

func (citeParser) Trigger() []byte { return []byte{'['} }

func (citeParser) Parse(_ ast.Node, block text.Reader, _ parser.Context) ast.Node {
	line, _ := block.PeekLine()
	m := citeMarker.FindSubmatch(line)
	if m == nil {
		return nil
	}
	block.Advance(len(m[0]))
	return &citeNode{id: string(m[1])}
}

type citeRenderer struct{}

var _ renderer.NodeRenderer = citeRenderer{}

func (citeRenderer) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(kindCite, renderCite)
}

// renderCite writes the citation's link, or, inside a link's text (where a
// second anchor cannot nest), the marker as written. The id needs no
// escaping: its pattern has no character HTML gives a meaning.
func renderCite(w util.BufWriter, _ []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	id := node.(*citeNode).id
	if insideLink(node) {
		_, _ = w.WriteString("[cite:" + id + "]")
		return ast.WalkContinue, nil
	}
	_, _ = w.WriteString(`<a class="cite" data-cite="` + id + `" href="#cite-` + id + `">[` + id + `]</a>`)
	return ast.WalkContinue, nil
}

func insideLink(n ast.Node) bool {
	for p := n.Parent(); p != nil; p = p.Parent() {
		switch p.Kind() {
		case ast.KindLink, ast.KindAutoLink:
			return true
		}
	}
	return false
}
