package gateway

import (
	"io"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// HTMLText reduces an HTML document to its title and readable text:
// scripts, styles, templates and embedded images dropped, block elements
// on lines of their own, runs of white space collapsed (except in pre).
func HTMLText(r io.Reader) (title, text string, err error) {
	doc, err := html.Parse(r)
	if err != nil {
		return "", "", err
	}
	var b strings.Builder
	var walk func(n *html.Node, pre bool)
	walk = func(n *html.Node, pre bool) {
		switch n.Type {
		case html.TextNode:
			if pre {
				b.WriteString(n.Data)
			} else if f := strings.Fields(n.Data); len(f) > 0 {
				if s := b.String(); len(s) > 0 && !strings.HasSuffix(s, "\n") && !strings.HasSuffix(s, " ") && startsWithSpace(n.Data) {
					b.WriteByte(' ')
				}
				b.WriteString(strings.Join(f, " "))
				if endsWithSpace(n.Data) {
					b.WriteByte(' ')
				}
			}
			return
		case html.ElementNode:
			switch n.DataAtom {
			case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Svg, atom.Iframe, atom.Object, atom.Head:
				if n.DataAtom == atom.Head {
					for c := n.FirstChild; c != nil; c = c.NextSibling {
						if c.DataAtom == atom.Title && c.FirstChild != nil && title == "" {
							title = strings.Join(strings.Fields(c.FirstChild.Data), " ")
						}
					}
				}
				return
			case atom.Title:
				if n.FirstChild != nil && title == "" {
					title = strings.Join(strings.Fields(n.FirstChild.Data), " ")
				}
				return
			case atom.Pre:
				pre = true
			case atom.Br:
				b.WriteByte('\n')
			case atom.Li:
				newline(&b)
				b.WriteString("- ")
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, pre)
		}
		if n.Type == html.ElementNode && block[n.DataAtom] {
			newline(&b)
		}
	}
	walk(doc, false)
	lines := strings.Split(b.String(), "\n")
	out := lines[:0]
	blank := false
	for _, l := range lines {
		l = strings.TrimRight(l, " \t")
		if strings.TrimSpace(l) == "" {
			if !blank && len(out) > 0 {
				out = append(out, "")
			}
			blank = true
			continue
		}
		out = append(out, l)
		blank = false
	}
	return title, strings.TrimSpace(strings.Join(out, "\n")), nil
}

var block = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Section: true, atom.Article: true, atom.Header: true, atom.Footer: true,
	atom.Main: true, atom.Nav: true, atom.Aside: true, atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true,
	atom.H5: true, atom.H6: true, atom.Ul: true, atom.Ol: true, atom.Li: true, atom.Table: true, atom.Tr: true,
	atom.Blockquote: true, atom.Pre: true, atom.Form: true, atom.Figure: true, atom.Dl: true, atom.Dt: true, atom.Dd: true,
}

func newline(b *strings.Builder) {
	if s := b.String(); len(s) > 0 && !strings.HasSuffix(s, "\n") {
		b.WriteByte('\n')
	}
}

func startsWithSpace(s string) bool { return s != "" && strings.ContainsRune(" \t\n\r\f", rune(s[0])) }
func endsWithSpace(s string) bool {
	return s != "" && strings.ContainsRune(" \t\n\r\f", rune(s[len(s)-1]))
}
