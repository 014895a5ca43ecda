package framingdiff

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
)

// sidMark stands for a shape's run id in its bytes; it is replaced, at the
// same width, when the shape is sent, so a re-run gets fresh paths and
// every length in the shape stays right.
const sidMark = "@@@@@@"

func withSID(s string, sid int) string {
	return strings.ReplaceAll(s, sidMark, fmt.Sprintf("%06d", sid))
}

// wantReq is one request as the client meant it: what an engine behind a
// correct front end receives.
type wantReq struct{ method, path, body string }

func (w wantReq) String() string { return fmt.Sprintf("%s %s %q", w.method, w.path, w.body) }

// shape is one byte string sent on a fresh connection and what it means.
// An ambiguous shape has no reading that is the client's (two lengths, a
// coding nobody can decode, a line end two parsers split differently):
// nothing of it may reach an engine.
type shape struct {
	name      string
	raw       string
	want      []wantReq // the requests, in order; nil when ambiguous
	ambiguous bool
	// control: plain requests every reader forwards exactly as sent. The
	// run holds nginx and both front ends to them, so a run in which
	// nothing reaches an engine (every shape "refused" alike) fails.
	control bool
}

// chunk is one chunk of a chunked body as written on the wire.
type chunk struct{ size, ext, eol, data, end string }

// msg is a request as the generator builds it: the grammar's pieces, each
// of which a mutation may replace with a deviant spelling.
type msg struct {
	lead                  string // bytes before the request line
	method, target, proto string
	sp1, sp2, reqEOL      string
	lines, eols           []string // field lines and their terminators
	headEnd               string

	chunked   bool
	chunks    []chunk
	last      string // the last chunk's line, "0" and any extension
	lastEOL   string
	trailers  []string
	bodyEnd   string
	body      string // the raw body of a Content-Length (or bodiless) request
	path      string // the path the engine should see
	payload   string // the body the engine should see
	ambiguous bool
	clShift   int  // Content-Length minus the body's bytes (cl-mismatch)
	unframed  bool // the framing field was renamed away: no body, the bytes after the head start no request
	// rewrote names the framing lines a mutation replaced; a second one
	// leaves them alone, so no earlier verdict is overwritten unseen.
	rewrote map[string]bool
}

// claim reports whether the line named piece is still the generator's
// own, and marks it taken.
func (m *msg) claim(piece string) bool {
	if m.rewrote[piece] {
		return false
	}
	if m.rewrote == nil {
		m.rewrote = map[string]bool{}
	}
	m.rewrote[piece] = true
	return true
}

func (m *msg) String() string {
	var b strings.Builder
	b.WriteString(m.lead + m.method + m.sp1 + m.target + m.sp2 + m.proto + m.reqEOL)
	for i, l := range m.lines {
		b.WriteString(l + m.eols[i])
	}
	b.WriteString(m.headEnd)
	if !m.chunked {
		b.WriteString(m.body)
		return b.String()
	}
	for _, c := range m.chunks {
		b.WriteString(c.size + c.ext + c.eol + c.data + c.end)
	}
	b.WriteString(m.last + m.lastEOL)
	for _, t := range m.trailers {
		b.WriteString(t + "\r\n")
	}
	b.WriteString(m.bodyEnd)
	return b.String()
}

func (m *msg) want() wantReq { return wantReq{m.method, m.path, m.payload} }

// field returns the index of the first field line whose name is name.
func (m *msg) field(name string) int {
	for i, l := range m.lines {
		if n, _, ok := strings.Cut(l, ":"); ok && n == name {
			return i
		}
	}
	return -1
}

// trace is the index of an X-Trace line fit to mutate: the first one, or a
// new one when a mutation already bent it.
func (m *msg) trace(r *rand.Rand) int {
	if i := m.field("X-Trace"); i >= 0 {
		return i
	}
	m.add("X-Trace: " + word(r, 4))
	return len(m.lines) - 1
}

func (m *msg) add(line string) {
	m.lines = append(m.lines, line)
	m.eols = append(m.eols, "\r\n")
}

func (m *msg) insert(i int, line string) {
	m.lines = append(m.lines[:i], append([]string{line}, m.lines[i:]...)...)
	m.eols = append(m.eols[:i], append([]string{"\r\n"}, m.eols[i:]...)...)
}

func (m *msg) remove(i int) {
	m.lines = append(m.lines[:i], m.lines[i+1:]...)
	m.eols = append(m.eols[:i], m.eols[i+1:]...)
}

// clLine is the index of the Content-Length line (-1 when none).
func (m *msg) clLine() int { return m.field("Content-Length") }
func (m *msg) teLine() int { return m.field("Transfer-Encoding") }

const letters = "abcdefghijklmnopqrstuvwxyz"

func word(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[r.Intn(len(letters))]
	}
	return string(b)
}

// newMsg builds a valid request named tag: a POST, PUT or bodiless GET,
// framed by Content-Length or chunked coding.
func newMsg(r *rand.Rand, tag string) *msg {
	path := "/v1/s" + sidMark + "/" + tag
	m := &msg{
		method: "POST", target: path, proto: "HTTP/1.1",
		sp1: " ", sp2: " ", reqEOL: "\r\n", headEnd: "\r\n", path: path,
	}
	switch r.Intn(10) {
	case 0:
		m.method = "PUT"
	case 1, 2:
		m.method = "GET"
	}
	m.add("Host: h.test")
	m.add("User-Agent: framingdiff")
	m.add("X-Trace: " + word(r, 6))
	if m.method == "GET" {
		return m
	}
	m.add("Content-Type: application/json")
	m.payload = `{"p":"` + word(r, r.Intn(40)) + `"}`
	if r.Intn(5) < 3 {
		m.add("Content-Length: " + strconv.Itoa(len(m.payload)))
		m.body = m.payload
		return m
	}
	m.chunked = true
	m.add("Transfer-Encoding: chunked")
	rest := m.payload
	for n := 1 + r.Intn(3); rest != ""; n-- {
		k := len(rest)
		if n > 1 {
			k = 1 + r.Intn(len(rest))
		}
		m.chunks = append(m.chunks, chunk{size: strconv.FormatInt(int64(k), 16), eol: "\r\n", data: rest[:k], end: "\r\n"})
		rest = rest[k:]
	}
	m.last, m.lastEOL, m.bodyEnd = "0", "\r\n", "\r\n"
	return m
}

// smuggledReq is the request an ambiguous shape hides after its body.
func smuggledReq() string {
	return "GET /v1/s" + sidMark + "/smuggled HTTP/1.1\r\nHost: h.test\r\n\r\n"
}

// variant is one spelling of a piece: neutral ones keep the request's
// meaning (a correct server may forward it as the client meant it).
type variant struct {
	v       string
	neutral bool
}

func pick(r *rand.Rand, vs []variant) variant { return vs[r.Intn(len(vs))] }

// mutation rewrites one piece of m; false when it does not apply to m.
type mutation struct {
	name string
	fn   func(r *rand.Rand, m *msg) bool
}

// mutations is the generator's grammar of deviations, by piece of the
// head and body. Each sets m.ambiguous when the result has no single
// reading.
var mutations = []mutation{
	{"cl+te", func(r *rand.Rand, m *msg) bool {
		if m.chunked {
			m.insert(r.Intn(len(m.lines)+1), "Content-Length: "+strconv.Itoa(r.Intn(60)))
		} else if m.clLine() >= 0 {
			m.insert(r.Intn(len(m.lines)+1), "Transfer-Encoding: chunked")
		} else {
			return false
		}
		m.ambiguous = true
		return true
	}},
	{"cl-duplicate", func(r *rand.Rand, m *msg) bool {
		i := m.clLine()
		if i < 0 {
			return false
		}
		v := strconv.Itoa(len(m.body))
		if r.Intn(2) == 0 {
			v = strconv.Itoa(len(m.body) + 1 + r.Intn(40))
			m.ambiguous = true
		}
		m.insert(r.Intn(len(m.lines)+1), "Content-Length: "+v)
		m.ambiguous = m.ambiguous || m.clShift != 0
		return true
	}},
	{"cl-value", func(r *rand.Rand, m *msg) bool {
		i := m.clLine()
		if i < 0 || !m.claim("cl") {
			return false
		}
		n := strconv.Itoa(len(m.body))
		v := pick(r, []variant{
			{"+" + n, false}, {"0" + n, true}, {" " + n + " ", true}, {"\t" + n, true},
			{n + "," + n, false}, {n + ", " + n, false}, {"0x" + strconv.FormatInt(int64(len(m.body)), 16), false},
			{"-" + n, false}, {n + ".0", false}, {"1" + strings.Repeat("0", 19) + n, false},
			{n + "\x00", false}, {n + " x", false}, {"", false}, {"\x0b" + n, false}, {`"` + n + `"`, false},
		})
		m.clShift = 0
		m.lines[i] = "Content-Length:" + v.v
		if !strings.HasPrefix(v.v, " ") && !strings.HasPrefix(v.v, "\t") {
			m.lines[i] = "Content-Length: " + v.v
		}
		m.ambiguous = m.ambiguous || !v.neutral
		return true
	}},
	{"cl-mismatch", func(r *rand.Rand, m *msg) bool {
		i := m.clLine()
		if i < 0 || m.body == "" || !m.claim("cl") {
			return false
		}
		// The length rules: one short of the body leaves a byte that starts
		// no request; one past it leaves the server waiting for a byte that
		// never comes (no request whole), unless a later request's bytes
		// are read as the rest of this body.
		n := len(m.body) + []int{-1, 1, 7}[r.Intn(3)]
		m.lines[i] = "Content-Length: " + strconv.Itoa(n)
		m.clShift = n - len(m.body)
		return true
	}},
	{"te-value", func(r *rand.Rand, m *msg) bool {
		i := m.teLine()
		if i < 0 || !m.claim("te") {
			return false
		}
		v := pick(r, []variant{
			{"Chunked", true}, {"CHUNKED", true}, {"chunked ", true}, {"\tchunked", true},
			{"chunked, chunked", false}, {"gzip, chunked", false}, {"identity, chunked", false},
			{"chunked, identity", false}, {"xchunked", false}, {"chunked;q=1", false}, {"chunk", false},
			{"\x0bchunked", false}, {"chunked\x00", false}, {`"chunked"`, false}, {"", false},
			{"chunked\x0c", false}, {"ch unked", false}, {"chunked,", false}, {",chunked", false},
		})
		m.lines[i] = "Transfer-Encoding: " + v.v
		m.ambiguous = m.ambiguous || !v.neutral
		return true
	}},
	{"framing-name", func(r *rand.Rand, m *msg) bool {
		i, name := m.teLine(), "Transfer-Encoding"
		if i < 0 {
			i, name = m.clLine(), "Content-Length"
		}
		if i < 0 {
			return false
		}
		v := pick(r, []variant{
			{strings.ToLower(name), true}, {strings.ToUpper(name), true}, {name + " ", false}, {name + "\t", false},
			{" " + name, false}, {"\t" + name, false}, {name + "\x00", false},
			// Other fields' names: the request has no framing field.
			{strings.ReplaceAll(name, "-", "_"), true}, {"X-" + name, true}, {name + "s", true},
		})
		_, val, _ := strings.Cut(m.lines[i], ":")
		m.lines[i] = v.v + ":" + val
		m.unframed = m.unframed || (v.neutral && !strings.EqualFold(v.v, name))
		m.ambiguous = m.ambiguous || !v.neutral
		return true
	}},
	{"te-duplicate", func(r *rand.Rand, m *msg) bool {
		if m.teLine() < 0 {
			return false
		}
		m.insert(r.Intn(len(m.lines)+1), "Transfer-Encoding: "+[]string{"chunked", "identity", "x"}[r.Intn(3)])
		m.ambiguous = true
		return true
	}},
	{"framing-fold", func(r *rand.Rand, m *msg) bool {
		i := m.teLine()
		if i < 0 {
			i = m.clLine()
		}
		if i < 0 {
			return false
		}
		name, val, _ := strings.Cut(m.lines[i], ":")
		m.lines[i] = name + ":"
		m.insert(i+1, []string{" ", "\t"}[r.Intn(2)]+strings.TrimSpace(val))
		m.ambiguous = true
		return true
	}},
	{"http/1.0", func(r *rand.Rand, m *msg) bool {
		m.proto = "HTTP/1.0"
		if r.Intn(2) == 0 {
			m.add("Connection: keep-alive")
		}
		// RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding is faulty.
		m.ambiguous = m.ambiguous || m.teLine() >= 0
		return true
	}},
	{"connection", func(r *rand.Rand, m *msg) bool {
		m.add("Connection: " + []string{"close", "keep-alive", "Close", "close, te", "upgrade"}[r.Intn(5)])
		return true
	}},
	{"obs-fold", func(r *rand.Rand, m *msg) bool {
		i := m.trace(r)
		m.insert(i+1, []string{" ", "\t", "  "}[r.Intn(3)]+word(r, 3))
		return true
	}},
	{"line-end", func(r *rand.Rand, m *msg) bool {
		eol := []string{"\n", "\r", "\r\r\n", "\n\r"}[r.Intn(4)]
		switch k := r.Intn(len(m.lines) + 2); k {
		case len(m.lines):
			m.reqEOL = eol
		case len(m.lines) + 1:
			m.headEnd = eol
		default:
			m.eols[k] = eol
		}
		// A lone LF may end a line for a lenient reader and not for a
		// strict one; a lone CR joins or splits lines depending on who reads.
		m.ambiguous = m.ambiguous || eol != "\n"
		return true
	}},
	{"bare-cr-in-value", func(r *rand.Rand, m *msg) bool {
		i := m.trace(r)
		m.lines[i] += "\r" + []string{"x", "Content-Length: 40", "Transfer-Encoding: chunked"}[r.Intn(3)]
		m.ambiguous = true
		return true
	}},
	{"space-before-colon", func(r *rand.Rand, m *msg) bool {
		i := m.trace(r)
		name, val, _ := strings.Cut(m.lines[i], ":")
		m.lines[i] = name + []string{" ", "\t", "  "}[r.Intn(3)] + ":" + val
		return true
	}},
	{"name-byte", func(r *rand.Rand, m *msg) bool {
		i := m.trace(r)
		b := "\x00\x01\t (/@[]\x7f\x80\xff_.!~\"{"[r.Intn(18)]
		name, val, _ := strings.Cut(m.lines[i], ":")
		k := r.Intn(len(name) + 1)
		m.lines[i] = name[:k] + string([]byte{b}) + name[k:] + ":" + val
		return true
	}},
	{"value-byte", func(r *rand.Rand, m *msg) bool {
		i := m.trace(r)
		b := "\x00\x01\x08\x0b\x0c\x1f\x7f\x80\xff\t\"\\"[r.Intn(12)]
		l := m.lines[i]
		k := len("X-Trace: ") + r.Intn(len(l)-len("X-Trace: ")+1)
		m.lines[i] = l[:k] + string([]byte{b}) + l[k:]
		return true
	}},
	{"host", func(r *rand.Rand, m *msg) bool {
		i := m.field("Host")
		switch r.Intn(10) {
		case 0:
			m.remove(i)
		case 1:
			m.add("Host: h.test")
		case 2:
			m.add("Host: other.test")
		case 3:
			m.lines[i] = "Host:"
		default:
			m.lines[i] = "Host: " + []string{"h.test:abc", "h test", "h.test\x01", "[::1]:80", "h.test:8080", "u@h.test", "h.test/x", "h_t.test", "h.test:"}[r.Intn(9)]
		}
		return true
	}},
	{"request-line", func(r *rand.Rand, m *msg) bool {
		switch r.Intn(14) {
		case 0:
			m.sp1 = "  "
		case 1:
			m.sp2 = "\t"
		case 2:
			m.method = strings.ToLower(m.method)
		case 3:
			m.method = "FROB"
		case 4:
			m.proto = []string{"HTTP/1.2", "HTTP/2.0", "HTTP/1.10", "http/1.1", "HTTP/1.1 ", "HTTP/01.1", "HTTP/3", "HTTP/1"}[r.Intn(8)]
		case 5:
			m.sp2, m.proto = "", "" // HTTP/0.9 style
		case 6:
			m.target = "http://h.test" + m.target // absolute-form
		case 7:
			m.target += "#frag"
			m.path = m.target // forwarded as sent (no reader cuts it)
		case 8:
			m.target += []string{"\x01", "\x7f", "\x80", "\t"}[r.Intn(4)]
		case 9:
			m.lead = []string{"\r\n", "\r\n\r\n", "\n", " "}[r.Intn(4)]
		case 10:
			m.target = "http://other.test" + m.target // absolute-form naming another host
		case 11:
			m.target = "*"
			m.path = "*"
		case 12:
			m.target = strings.Replace(m.target, "/v1", "/v1/./x/..", 1)
		default:
			m.target += " HTTP/1.1"
		}
		return true
	}},
	{"oversize", func(r *rand.Rand, m *msg) bool {
		switch r.Intn(5) {
		case 0:
			m.add("X-Big: " + strings.Repeat("b", 4<<10)) // under every limit
		case 1:
			m.add("X-Big: " + strings.Repeat("b", 70<<10)) // over every limit
		case 2:
			m.target += "?q=" + strings.Repeat("q", 70<<10)
		case 3:
			for k := 0; k < 300; k++ {
				m.add(fmt.Sprintf("X-F%d: v", k))
			}
		default:
			m.add(strings.Repeat("N", 70<<10) + ": v")
		}
		return true
	}},
	{"expect", func(r *rand.Rand, m *msg) bool {
		m.add("Expect: " + []string{"100-continue", "100-Continue", "y 100-continue", "200-ok", "100-continue\x0b"}[r.Intn(5)])
		return true
	}},
	{"chunk-size", func(r *rand.Rand, m *msg) bool {
		if !m.chunked || len(m.chunks) == 0 {
			return false
		}
		c := &m.chunks[r.Intn(len(m.chunks))]
		n, _ := strconv.ParseInt(c.size, 16, 64)
		v := pick(r, []variant{
			{"000" + c.size, true}, {strings.ToUpper(c.size), true},
			{"1" + fmt.Sprintf("%016x", n), false}, {"0x" + c.size, false}, {"-" + c.size, false},
			{c.size + " ", false}, {" " + c.size, false}, {"+" + c.size, false}, {c.size + "g", false},
			{strings.Repeat("0", 20) + c.size, true}, {"", false}, {c.size + "\x00", false},
		})
		c.size = v.v
		m.ambiguous = m.ambiguous || !v.neutral
		return true
	}},
	{"chunk-ext", func(r *rand.Rand, m *msg) bool {
		if !m.chunked {
			return false
		}
		v := pick(r, []variant{
			{";a", true}, {";a=b", true}, {`;a="q s"`, true}, {"; a = b", true}, {" ;a", true}, {"\t;a", true},
			{";a\nb", false}, {";a\rb", false}, {";a\r", false}, {";a=\"\r\n\"", false}, {";a\x00", false},
			{";" + strings.Repeat("e", 6<<10), true}, {"a", false}, {";", false},
		})
		if len(m.chunks) > 0 && r.Intn(3) > 0 {
			m.chunks[r.Intn(len(m.chunks))].ext = v.v
		} else {
			m.last += v.v
		}
		m.ambiguous = m.ambiguous || !v.neutral
		return true
	}},
	{"chunk-line-end", func(r *rand.Rand, m *msg) bool {
		if !m.chunked || len(m.chunks) == 0 {
			return false
		}
		c := &m.chunks[r.Intn(len(m.chunks))]
		e := []string{"\n", "\r", "", "X\r\n", "\r\r\n", "\n\r\n"}[r.Intn(6)]
		if r.Intn(2) == 0 {
			c.eol = e
		} else {
			c.end = e
		}
		m.ambiguous = true
		return true
	}},
	{"chunked-end", func(r *rand.Rand, m *msg) bool {
		if !m.chunked {
			return false
		}
		switch r.Intn(8) {
		case 0:
			m.last = "00"
		case 1:
			m.trailers = append(m.trailers, "X-Trailer: v")
		case 2:
			m.trailers = append(m.trailers, "Content-Length: 40")
		case 3:
			m.trailers = append(m.trailers, "X-Trailer: a\x01b")
			m.ambiguous = true
		case 4:
			m.trailers = append(m.trailers, " folded")
			m.ambiguous = true
		case 5:
			m.bodyEnd = "" // the last CRLF missing: the server waits
			m.ambiguous = true
		case 6:
			m.last, m.lastEOL, m.bodyEnd = "", "", "" // no last chunk
			m.ambiguous = true
		default:
			m.lastEOL = "\n"
			m.ambiguous = true
		}
		return true
	}},
}

// generate builds n shapes from seed: each a valid request with one or two
// mutations, sometimes followed by a valid pipelined request or (when
// ambiguous) a smuggled one.
func generate(seed int64, n int) []shape {
	r := rand.New(rand.NewSource(seed))
	out := make([]shape, 0, n)
	for len(out) < n {
		m := newMsg(r, "a")
		var names []string
		for k := 1 + r.Intn(2); k > 0; {
			mu := mutations[r.Intn(len(mutations))]
			if mu.fn(r, m) {
				names = append(names, mu.name)
				k--
			}
		}
		s := shape{name: strings.Join(names, "+"), raw: m.String(), ambiguous: m.ambiguous}
		w := m.want()
		switch {
		case s.ambiguous:
		case m.unframed:
			w.body = ""
			s.want = []wantReq{w}
			out = append(out, s) // what follows the head is no request
			continue
		case m.clShift > 0:
			out = append(out, s) // the body never ends: no request is whole
			continue
		case m.clShift < 0:
			w.body = w.body[:len(w.body)+m.clShift]
			s.want = []wantReq{w}
			out = append(out, s) // the last byte starts no request
			continue
		default:
			s.want = []wantReq{w}
		}
		switch k := r.Intn(10); {
		case k < 3:
			second := newMsg(r, "b")
			s.raw += second.String()
			s.name += "+pipelined"
			if !s.ambiguous {
				s.want = append(s.want, second.want())
			}
		case k < 6 && s.ambiguous:
			s.raw += smuggledReq()
			s.name += "+smuggled"
		}
		out = append(out, s)
	}
	return out
}
