package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"

	"github.com/valyala/fastjson"
)

// reviewBuffers hold the reduced text of a review while it is parsed.
var reviewBuffers = sync.Pool{New: func() any { return new([]byte) }}

// parsedReview is an AdmissionReview being decided. Building a parsed tree
// of a whole 6 KB UPDATE (managedFields, kubectl's last-applied
// configuration) costs more than deciding it, and the queries read a
// handful of its fields: so only the parts that the view's queries read
// (reads) are parsed, and the whole review only when a query reads more
// (a residual that failed, a snapshot built after the view).
type parsedReview struct {
	body []byte
	// reads names what part holds: nil when part is the whole review.
	reads *pathTree
	part  *fastjson.Value
	whole *fastjson.Value
	// parsers are put back by release.
	parsers []*fastjson.Parser
}

// parseReview checks that body is valid JSON and an AdmissionReview
// envelope, and parses what reads names of it (all of it when reads is
// nil). The caller releases it.
func parseReview(body []byte, reads *pathTree) (*parsedReview, error) {
	if len(body) == 0 {
		return nil, badRequest("the request body is empty: want an AdmissionReview (%s)", admissionAPIVersion)
	}
	r := &parsedReview{body: body, reads: reads}
	if reads == nil {
		reads = allPaths
	}
	// fastjson's Parse is lenient (it takes NaN, bad escapes); reduce is
	// not.
	buf := reviewBuffers.Get().(*[]byte)
	defer reviewBuffers.Put(buf)
	var err error
	if *buf, err = reduce((*buf)[:0], body, reads); err != nil {
		return nil, badRequest("the request body is not valid JSON: %v", err)
	}
	// The parser copies what it parses: the buffer is free again after.
	if r.part, err = r.parse(*buf); err != nil {
		r.release()
		return nil, err
	}
	if err := checkEnvelope(r.part); err != nil {
		r.release()
		return nil, err
	}
	return r, nil
}

func (r *parsedReview) parse(text []byte) (*fastjson.Value, error) {
	p := parsers.Get()
	r.parsers = append(r.parsers, p)
	v, err := p.ParseBytes(text)
	if err != nil {
		return nil, badRequest("the request body is not valid JSON: %v", err)
	}
	return v, nil
}

// request is the review's request.
func (r *parsedReview) request() *fastjson.Value { return r.part.Get("request") }

// reading returns the review parsed at least where paths read it.
func (r *parsedReview) reading(paths *pathTree) (*fastjson.Value, error) {
	if r.reads == nil || covers(r.reads, paths) {
		return r.part, nil
	}
	if r.whole == nil {
		whole, err := r.parse(r.body)
		if err != nil {
			return nil, err
		}
		r.whole = whole
	}
	return r.whole, nil
}

// release puts the parsers back; nothing of the review may be used after.
func (r *parsedReview) release() {
	for _, p := range r.parsers {
		parsers.Put(p)
	}
	r.parsers = nil
}

// allPaths reads everything.
var allPaths = &pathTree{all: true}

// covers reports whether big reads all that small reads.
func covers(big, small *pathTree) bool {
	if big.all {
		return true
	}
	if small.all {
		return false
	}
	for k, c := range small.children {
		b, ok := big.children[k]
		if !ok || !covers(b, c) {
			return false
		}
	}
	return true
}

// union is a new sealed tree that reads all that trees read.
func union(trees ...*pathTree) *pathTree {
	u := &pathTree{}
	for _, t := range trees {
		u.merge(nil, t)
	}
	return u.seal()
}

// merge records in t that other, the tree of the value at path, reads.
func (t *pathTree) merge(path []string, other *pathTree) {
	if other.all {
		t.add(path)
		return
	}
	t.touch(path)
	for k, c := range other.children {
		t.merge(append(path[:len(path):len(path)], k), c)
	}
}

// reduce checks that src is one valid JSON value, as strictly as
// fastjson.Validate, and appends to dst its text cut down to what tree
// reads, as project reads it: an object read in part keeps its members
// whose keys the tree names, in order, a repeated key as often as it
// repeats; every other value (one read whole, one that is not an object) is
// copied as it is written. Parsing the result gives the projections and
// decision-cache keys that parsing src gives. One pass does both: checking
// and cutting the text each cost about as much as parsing it.
func reduce(dst, src []byte, tree *pathTree) ([]byte, error) {
	r := reducer{src: src}
	r.space()
	dst, err := r.value(dst, tree)
	if err != nil {
		return dst, err
	}
	if r.space(); r.i < len(src) {
		return dst, r.fail("unexpected data after the JSON value")
	}
	return dst, nil
}

// reducer walks a JSON text, checking it as it goes.
type reducer struct {
	src []byte
	i   int
}

func (r *reducer) fail(what string) error {
	return fmt.Errorf("at byte %d: %s", r.i, what)
}

// value copies to dst what tree reads of the value at r.i (nil: nothing).
func (r *reducer) value(dst []byte, tree *pathTree) ([]byte, error) {
	if r.i < len(r.src) && r.src[r.i] == '{' && tree != nil && !tree.all {
		return r.object(dst, tree)
	}
	start := r.i
	if err := r.skip(); err != nil {
		return dst, err
	}
	if tree == nil {
		return dst, nil
	}
	return append(dst, r.src[start:r.i]...), nil
}

// object copies to dst the members of the object at r.i that tree reads;
// tree nil copies nothing.
func (r *reducer) object(dst []byte, tree *pathTree) ([]byte, error) {
	r.i++
	if tree != nil {
		dst = append(dst, '{')
	}
	first := true
	r.space()
	if r.i < len(r.src) && r.src[r.i] == '}' {
		r.i++
		if tree != nil {
			dst = append(dst, '}')
		}
		return dst, nil
	}
	for {
		r.space()
		if r.i >= len(r.src) || r.src[r.i] != '"' {
			return dst, r.fail("want an object key")
		}
		keyStart := r.i
		if err := r.skipString(); err != nil {
			return dst, err
		}
		key := r.src[keyStart:r.i]
		if r.space(); r.i >= len(r.src) || r.src[r.i] != ':' {
			return dst, r.fail("want ':' after an object key")
		}
		r.i++
		r.space()
		var child *pathTree
		if tree != nil {
			child = tree.child(key)
		}
		if child != nil {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(append(dst, key...), ':')
		}
		var err error
		if dst, err = r.value(dst, child); err != nil {
			return dst, err
		}
		r.space()
		if r.i >= len(r.src) {
			return dst, r.fail("the object does not end")
		}
		switch r.src[r.i] {
		case ',':
			r.i++
		case '}':
			r.i++
			if tree != nil {
				dst = append(dst, '}')
			}
			return dst, nil
		default:
			return dst, r.fail("want ',' or '}' after an object member")
		}
	}
}

// child is the subtree of the member whose key is the JSON string key
// (with its quotes); nil when the tree does not read it.
func (t *pathTree) child(key []byte) *pathTree {
	name := key[1 : len(key)-1]
	if bytes.IndexByte(name, '\\') < 0 {
		return t.children[string(name)]
	}
	var p fastjson.Parser
	v, err := p.ParseBytes(key)
	if err != nil {
		return nil // cannot be: the key was checked
	}
	return t.children[string(v.GetStringBytes())]
}

func (r *reducer) space() {
	for r.i < len(r.src) {
		switch r.src[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// skip checks the value at r.i and moves past it.
func (r *reducer) skip() error {
	if r.i >= len(r.src) {
		return r.fail("want a JSON value")
	}
	switch r.src[r.i] {
	case '{':
		_, err := r.object(nil, nil)
		return err
	case '[':
		return r.array()
	case '"':
		return r.skipString()
	case 't':
		return r.literal("true")
	case 'f':
		return r.literal("false")
	case 'n':
		return r.literal("null")
	}
	return r.number()
}

func (r *reducer) array() error {
	r.i++
	r.space()
	if r.i < len(r.src) && r.src[r.i] == ']' {
		r.i++
		return nil
	}
	for {
		r.space()
		if err := r.skip(); err != nil {
			return err
		}
		r.space()
		if r.i >= len(r.src) {
			return r.fail("the array does not end")
		}
		switch r.src[r.i] {
		case ',':
			r.i++
		case ']':
			r.i++
			return nil
		default:
			return r.fail("want ',' or ']' after an array element")
		}
	}
}

func (r *reducer) literal(word string) error {
	if !bytes.HasPrefix(r.src[r.i:], []byte(word)) {
		return r.fail("want " + word)
	}
	r.i += len(word)
	return nil
}

// number checks a number as JSON writes it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *reducer) number() error {
	if r.i < len(r.src) && r.src[r.i] == '-' {
		r.i++
	}
	start := r.i
	if r.digits() == 0 {
		return r.fail("want a JSON value")
	}
	if r.src[start] == '0' && r.i-start > 1 {
		return r.fail("a number cannot start with 0")
	}
	if r.i < len(r.src) && r.src[r.i] == '.' {
		r.i++
		if r.digits() == 0 {
			return r.fail("want digits after the decimal point")
		}
	}
	if r.i < len(r.src) && (r.src[r.i] == 'e' || r.src[r.i] == 'E') {
		r.i++
		if r.i < len(r.src) && (r.src[r.i] == '+' || r.src[r.i] == '-') {
			r.i++
		}
		if r.digits() == 0 {
			return r.fail("want digits in the exponent")
		}
	}
	return nil
}

func (r *reducer) digits() int {
	start := r.i
	for r.i < len(r.src) && r.src[r.i] >= '0' && r.src[r.i] <= '9' {
		r.i++
	}
	return r.i - start
}

// skipString checks the string at r.i and moves past it: no control
// characters, and only JSON's escapes.
func (r *reducer) skipString() error {
	for j := r.i + 1; j < len(r.src); {
		// Most of a string is plain text: look at it eight bytes at a
		// time, and stop at the first byte that ends or escapes the string
		// or must not be in it.
		for j+8 <= len(r.src) {
			if stops := stringStops(binary.LittleEndian.Uint64(r.src[j:])); stops != 0 {
				j += bits.TrailingZeros64(stops) / 8
				break
			}
			j += 8
		}
		if j >= len(r.src) {
			break
		}
		c := r.src[j]
		switch {
		case c == '"':
			r.i = j + 1
			return nil
		case c == '\\':
			if j+1 >= len(r.src) {
				break
			}
			switch r.src[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
				continue
			case 'u':
				if j+6 <= len(r.src) && isHex4(r.src[j+2:j+6]) {
					j += 6
					continue
				}
			}
			r.i = j
			return r.fail("a string holds an escape JSON does not have")
		case c < 0x20:
			r.i = j
			return r.fail(fmt.Sprintf("a string holds control character 0x%02X", c))
		}
		j++
	}
	return r.fail("a string does not end")
}

// Byte-wise constants for stringStops.
const (
	eachByte    = 0x0101010101010101
	highBits    = 0x8080808080808080
	quotes      = eachByte * '"'
	backslashes = eachByte * '\\'
	controls    = eachByte * 0x20
)

// stringStops returns w (eight bytes of a string, little-endian) with the
// high bit set in its lowest byte that is a quote, a backslash or a control
// character, and 0 when it has none. Bits above that lowest byte may be
// set wrongly (a borrow moves up), so only the lowest one is meaningful.
func stringStops(w uint64) uint64 {
	q, b := w^quotes, w^backslashes
	return (((q - eachByte) &^ q) | ((b - eachByte) &^ b) | ((w - controls) &^ w)) & highBits
}

func isHex4(b []byte) bool {
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return true
}
