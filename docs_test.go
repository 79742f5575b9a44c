package fleetwatch_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks holds the relative links of README.md and docs/*.md to the repository:
// each names a file or directory that exists and, where it names a heading (#anchor),
// a heading of that Markdown file, by the anchor GitHub makes of it. Links to other
// sites are not followed.
func TestDocLinks(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{"README.md"}, docs...)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchors[path] = headingAnchors(string(b))
		return anchors[path], nil
	}
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(b)) {
			if strings.Contains(l.dest, "://") || strings.HasPrefix(l.dest, "mailto:") {
				continue
			}
			checked++
			target, anchor, _ := strings.Cut(l.dest, "#")
			path := doc
			if target != "" {
				path = filepath.Join(filepath.Dir(doc), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %q: no such file or directory %s", doc, l.line, l.dest, path)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into %s, which is not Markdown", doc, l.line, l.dest, path)
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", doc, l.line, l.dest, err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", doc, l.line, l.dest, path, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the parser is broken")
	}
}

type docLink struct {
	line int
	dest string
}

var (
	// inlineLink matches the destination of an inline link or image, with an optional
	// title: [text](dest) or [text](dest "title").
	inlineLink = regexp.MustCompile(`\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)`)
	// referenceLink matches a link reference definition: [label]: dest.
	referenceLink = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s+<?([^\s>]+)>?`)
	codeSpan      = regexp.MustCompile("`+[^`]*`+")
)

// markdownLinks returns the destinations of the links and images of a Markdown text,
// outside code blocks and code spans.
func markdownLinks(text string) []docLink {
	var links []docLink
	for i, line := range proseLines(text) {
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, docLink{i + 1, m[1]})
		}
		if m := referenceLink.FindStringSubmatch(line); m != nil {
			links = append(links, docLink{i + 1, m[1]})
		}
	}
	return links
}

// fenceOf returns the fence (``` or ~~~, as long as written) that line opens or closes
// a code block with, or "".
func fenceOf(line string) string {
	line = strings.TrimLeft(line, " ")
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			return line[:n]
		}
	}
	return ""
}

var (
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// headingAnchors returns the anchors that GitHub gives the headings of a Markdown text
// (lower case, punctuation dropped but for - and _, a hyphen for each space, -1, -2 …
// after a repeated one), and those of its <a id> and <a name> elements.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := githubSlug(linkText.ReplaceAllString(m[1], "$1"))
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

func githubSlug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGitHubAnchors(t *testing.T) {
	got := headingAnchors("# fleetwatch — design\n" +
		"## The compact cache under `fleetwatch serve`\n" +
		"```sh\n# not a heading\n```\n" +
		"### Compression dictionaries per resource, measured (2026-11-28)\n" +
		"## HTTP API of the daemon (read-only)\n" +
		"## Security\n## Security\n" +
		"## See [the design](design.md) ##\n" +
		`<a id="here"></a>` + "\n")
	for _, want := range []string{
		"fleetwatch--design",
		"the-compact-cache-under-fleetwatch-serve",
		"compression-dictionaries-per-resource-measured-2026-11-28",
		"http-api-of-the-daemon-read-only",
		"security", "security-1",
		"see-the-design",
		"here",
	} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code block made an anchor")
	}
	links := markdownLinks("[a](x.md) `[b](y.md)` ![c](d.png \"title\")\n```\n[e](f.md)\n```\n[g]: h.md\n")
	var dests []string
	for _, l := range links {
		dests = append(dests, l.dest)
	}
	if fmt.Sprint(dests) != "[x.md d.png h.md]" {
		t.Errorf("links %v, want [x.md d.png h.md]", dests)
	}
}

// proseLines returns the lines of a Markdown text outside fenced code blocks, by their
// index in the text; the lines of the blocks are empty.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, line := range lines {
		if f := fenceOf(line); f != "" {
			switch {
			case fence == "":
				fence = f
			case strings.HasPrefix(f, fence):
				fence = ""
			}
			lines[i] = ""
			continue
		}
		if fence != "" {
			lines[i] = ""
		}
	}
	return lines
}
