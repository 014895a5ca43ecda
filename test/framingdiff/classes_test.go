package framingdiff

import (
	"strconv"
	"strings"
)

// req builds a request line and fields (CRLF-terminated, head closed) for
// the published classes below.
func req(method, tag string, fields ...string) string {
	return method + " /v1/s" + sidMark + "/" + tag + " HTTP/1.1\r\nHost: h.test\r\n" + strings.Join(fields, "\r\n") + "\r\n\r\n"
}

func clen(s string) string { return "Content-Length: " + strconv.Itoa(len(s)) }

// publishedClasses are the smuggling classes of public desync research,
// each written here from its description: two lengths (CL.TE, TE.CL), a
// Transfer-Encoding one reader does not recognise (TE.TE), a body one
// reader ignores (CL.0, 0.CL), chunk lines that readers end differently
// (TERM.EXT, EXT.TERM, lone-LF chunk ends), chunk sizes that overflow, the
// Expect handshake, HTTP/1.0 keep-alive, and a framing field hidden behind
// line folding or a lone CR.
func publishedClasses() []shape {
	sm := smuggledReq()
	post := func(tag string) wantReq { return wantReq{"POST", "/v1/s" + sidMark + "/" + tag, ""} }
	amb := func(name, raw string) shape { return shape{name: name, raw: raw, ambiguous: true} }
	chunked0 := "0\r\n\r\n"
	return []shape{
		amb("CL.TE", req("POST", "a", clen(chunked0+sm), "Transfer-Encoding: chunked")+chunked0+sm),
		amb("TE.CL", req("POST", "a", "Transfer-Encoding: chunked", "Content-Length: 4")+
			strconv.FormatInt(int64(len(sm)), 16)+"\r\n"+sm+"\r\n"+chunked0),
		amb("TE.TE xchunked", req("POST", "a", "Transfer-Encoding: xchunked", clen(chunked0+sm))+chunked0+sm),
		amb("TE.TE space before colon", req("POST", "a", "Transfer-Encoding : chunked", "Content-Length: 3")+chunked0+sm),
		amb("TE.TE tab value", req("POST", "a", "Transfer-Encoding:\tchunked", "Content-Length: 3")+chunked0+sm),
		amb("TE.TE two values", req("POST", "a", "Transfer-Encoding: chunked", "Transfer-Encoding: cow")+chunked0+sm),
		amb("TE.TE folded", req("POST", "a", "X-A: b", " Transfer-Encoding: chunked", "Content-Length: 3")+chunked0+sm),
		amb("TE.TE behind lone CR", req("POST", "a", "X-A: b\rTransfer-Encoding: chunked", "Content-Length: 3")+chunked0+sm),
		amb("TE.TE newline name", req("POST", "a", "Transfer-Encoding\n : chunked", "Content-Length: 3")+chunked0+sm),
		// CL.0: the body, by Content-Length, is a whole request; a reader
		// that ignores GET bodies would run it. Read by the rules, it is
		// one request with that body.
		{name: "CL.0 GET with body", raw: req("GET", "a", clen(sm)) + sm,
			want: []wantReq{{"GET", "/v1/s" + sidMark + "/a", sm}}},
		{name: "CL.0 Content-Length 0 then request", raw: req("POST", "a", "Content-Length: 0") + sm,
			want: []wantReq{post("a"), {"GET", "/v1/s" + sidMark + "/smuggled", ""}}},
		amb("0.CL obfuscated length", req("POST", "a", "Content-Length : "+strconv.Itoa(len(sm)))+sm),
		amb("TERM.EXT", req("POST", "a", "Transfer-Encoding: chunked")+"2;\n\r\nxx\r\n45\r\n"+chunked0+sm),
		amb("EXT.TERM", req("POST", "a", "Transfer-Encoding: chunked")+"2;a\nb\r\nxx\r\n"+chunked0+sm),
		amb("chunk data ended by LF", req("POST", "a", "Transfer-Encoding: chunked")+"2\r\nxx\n"+chunked0+sm),
		amb("chunk data ended by nothing", req("POST", "a", "Transfer-Encoding: chunked")+"2\r\nxx"+chunked0+sm),
		amb("chunk size overflow", req("POST", "a", "Transfer-Encoding: chunked")+"10000000000000002\r\nxx\r\n"+chunked0+sm),
		amb("chunk size 0x", req("POST", "a", "Transfer-Encoding: chunked")+"0x2\r\nxx\r\n"+chunked0+sm),
		amb("Expect obfuscated with CL.0", req("POST", "a", "Expect: y 100-continue", "Content-Length: "+strconv.Itoa(len(sm)))),
		{name: "Expect 100-continue", control: true, raw: req("POST", "a", "Expect: 100-continue", "Content-Length: 2") + "{}",
			want: []wantReq{{"POST", "/v1/s" + sidMark + "/a", "{}"}}},
		{name: "HTTP/1.0 keep-alive pipeline", control: true, raw: strings.Replace(req("POST", "a", "Connection: keep-alive", "Content-Length: 2"), "HTTP/1.1", "HTTP/1.0", 1) + "{}" + req("POST", "b", "Content-Length: 1") + "x",
			want: []wantReq{{"POST", "/v1/s" + sidMark + "/a", "{}"}, {"POST", "/v1/s" + sidMark + "/b", "x"}}},
		{name: "HTTP/1.0 without keep-alive then more", raw: strings.Replace(req("POST", "a", "Content-Length: 2"), "HTTP/1.1", "HTTP/1.0", 1) + "{}" + sm,
			want: []wantReq{{"POST", "/v1/s" + sidMark + "/a", "{}"}}},
		amb("TE in HTTP/1.0", strings.Replace(req("POST", "a", "Transfer-Encoding: chunked", "Connection: keep-alive"), "HTTP/1.1", "HTTP/1.0", 1)+chunked0+sm),
		amb("duplicate Content-Length", req("POST", "a", "Content-Length: 0", clen(sm))+sm),
		amb("Content-Length list", req("POST", "a", "Content-Length: 0, "+strconv.Itoa(len(sm)))+sm),
		// A lone LF ending the request line: read as a line end (RFC 9112
		// §2.2 allows it) the bytes are two requests.
		{name: "request line ended by LF", raw: "POST /v1/s" + sidMark + "/a HTTP/1.1\nHost: h.test\r\nContent-Length: 0\r\n\r\n" + sm,
			want: []wantReq{post("a"), {"GET", "/v1/s" + sidMark + "/smuggled", ""}}},
		{name: "chunked good then pipelined", control: true, raw: req("POST", "a", "Transfer-Encoding: chunked") + "2\r\n{}\r\n" + chunked0 + req("POST", "b", "Content-Length: 2") + "{}",
			want: []wantReq{{"POST", "/v1/s" + sidMark + "/a", "{}"}, {"POST", "/v1/s" + sidMark + "/b", "{}"}}},
		{name: "absolute-form", control: true, raw: "POST http://h.test/v1/s" + sidMark + "/a HTTP/1.1\r\nHost: h.test\r\nContent-Length: 2\r\n\r\n{}",
			want: []wantReq{{"POST", "/v1/s" + sidMark + "/a", "{}"}}},
		{name: "missing Host", raw: "POST /v1/s" + sidMark + "/a HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
			want: []wantReq{{"POST", "/v1/s" + sidMark + "/a", "{}"}}},
	}
}
