package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// reduceTree is the tree the reduce tests cut texts down to: a value read
// whole, an object read in part, one whose type only is read, one under an
// escaped key.
func reduceTree() *pathTree {
	tree := &pathTree{}
	tree.add([]string{"request", "operation"})
	tree.touch([]string{"request", "object", "metadata", "annotations"})
	tree.add([]string{"request", "object", "metadata", "annotations", "a"})
	tree.touch([]string{"request", "oldObject"})
	tree.add([]string{"request", "userInfo"})
	tree.add([]string{"request", "é/x"})
	return tree.seal()
}

// TestReduce checks what reduce keeps of a text, and that it refuses
// every text fastjson.Validate refuses, naming where.
func TestReduce(t *testing.T) {
	tests := map[string]struct {
		body, want, wantErr string
	}{
		"members not read go": {
			body: `{"apiVersion":"v1","request":{"name":"x","operation":"CREATE","object":{"spec":{"a":[1,{"b":"}"}]},"metadata":{"annotations":{"b":"1","a":"2"}}}}}`,
			want: `{"request":{"operation":"CREATE","object":{"metadata":{"annotations":{"a":"2"}}}}}`,
		},
		"repeated keys stay, in order": {
			body: `{"request":{"operation":"DELETE","x":1,"operation":"CREATE"}}`,
			want: `{"request":{"operation":"DELETE","operation":"CREATE"}}`,
		},
		"a type read keeps an empty object": {
			body: `{"request":{"oldObject":{"metadata":{"name":"x"}}}}`,
			want: `{"request":{"oldObject":{}}}`,
		},
		"values that are not objects stay whole": {
			body: `{"request":{"oldObject":[1,2],"object":"x","userInfo":{"groups":["a","b\"c"],"extra":{}}}}`,
			want: `{"request":{"oldObject":[1,2],"object":"x","userInfo":{"groups":["a","b\"c"],"extra":{}}}}`,
		},
		"escaped keys are matched unescaped, written as they were": {
			body: `{"request":{"\u00e9\/x":true,"oper\u0061tion":null}}`,
			want: `{"request":{"\u00e9\/x":true,"oper\u0061tion":null}}`,
		},
		"white space": {
			body: " \t\n{ \"request\" :\r{ \"operation\" : \"UPDATE\" , \"name\" : [ 1 , 2 ] } }\n",
			want: `{"request":{"operation":"UPDATE"}}`,
		},
		"not an object":             {body: `[{"request":1}]`, want: `[{"request":1}]`},
		"numbers":                   {body: `{"x":[-0,1.5e10,2E-3,0.25],"request":{"operation":-12.5e+3}}`, want: `{"request":{"operation":-12.5e+3}}`},
		"NaN":                       {body: `{"x":NaN}`, wantErr: "at byte 5: want a JSON value"},
		"leading zero":              {body: `{"x":01}`, wantErr: "cannot start with 0"},
		"bare minus":                {body: `{"x":-}`, wantErr: "want a JSON value"},
		"no fraction":               {body: `{"x":1.}`, wantErr: "after the decimal point"},
		"no exponent":               {body: `{"x":1e+}`, wantErr: "in the exponent"},
		"bad escape, skipped":       {body: `{"x":"\q"}`, wantErr: "at byte 6: a string holds an escape JSON does not have"},
		"short unicode escape":      {body: `{"x":"\u12"}`, wantErr: "an escape JSON does not have"},
		"control character":         {body: "{\"x\":\"a\x01\"}", wantErr: "control character 0x01"},
		"control character in keys": {body: "{\"x\x1f\":1}", wantErr: "control character 0x1F"},
		"unterminated string":       {body: `{"x":"abc`, wantErr: "a string does not end"},
		"truncated":                 {body: `{"request":{"operation":"CREATE"`, wantErr: "the object does not end"},
		"missing colon":             {body: `{"x" 1}`, wantErr: "want ':'"},
		"missing comma":             {body: `{"x":1 "y":2}`, wantErr: "want ',' or '}'"},
		"array without comma":       {body: `[1 2]`, wantErr: "want ',' or ']'"},
		"key not a string":          {body: `{x:1}`, wantErr: "want an object key"},
		"trailing comma":            {body: `{"x":1,}`, wantErr: "want an object key"},
		"bad literal":               {body: `{"x":tru}`, wantErr: "want true"},
		"trailing data":             {body: `{"x":1}{}`, wantErr: "at byte 7: unexpected data after the JSON value"},
		"empty":                     {body: ``, wantErr: "want a JSON value"},
		"only space":                {body: " \n", wantErr: "want a JSON value"},
	}
	tree := reduceTree()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := reduce(nil, []byte(tc.body), tree)
			if tc.wantErr != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.wantErr)) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if json.Valid([]byte(tc.body)) {
					t.Fatalf("%q is JSON", tc.body)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("reduced to %s\nwant       %s", got, tc.want)
			}
		})
	}
}

// TestSkipStringAtEveryOffset puts each byte that ends, escapes or breaks a
// string at every offset of the eight-byte words skipString reads, with
// bytes on either side that must not stop it (the space, DEL, bytes of
// UTF-8 sequences): each is found where it is, as a byte-at-a-time reading
// finds it.
func TestSkipStringAtEveryOffset(t *testing.T) {
	const prefix = `{"x":"` // the string's text starts at byte 6
	tests := []struct {
		name    string
		insert  string
		wantErr string // what the error names; "" for valid JSON
	}{
		{"the closing quote", `"`, ""},
		{"an escaped quote", `\"`, ""},
		{"an escaped backslash", `\\`, ""},
		{"a unicode escape", `\u00e9`, ""},
		{"an escape JSON does not have", `\q`, "a string holds an escape JSON does not have"},
		{"a short unicode escape", `\u12x4`, "a string holds an escape JSON does not have"},
		{"a NUL", "\x00", "a string holds control character 0x00"},
		{"a unit separator", "\x1f", "a string holds control character 0x1F"},
		{"a tab", "\t", "a string holds control character 0x09"},
	}
	for _, tc := range tests {
		for offset := range 20 {
			for _, filler := range []string{"a", " ", "\x7f", "\xc3\xa9", "\xff"} {
				text := strings.Repeat(filler, offset)[:offset] + tc.insert + strings.Repeat(filler, 24)[:24]
				body := prefix + text + `"}`
				if tc.insert == `"` {
					body = prefix + text[:offset] + `"}`
				}
				_, err := reduce(nil, []byte(body), reduceTree())
				if tc.wantErr == "" {
					if err != nil {
						t.Errorf("%s at offset %d among %q: %v", tc.name, offset, filler, err)
					}
					continue
				}
				at := fmt.Sprintf("at byte %d: %s", len(prefix)+offset, tc.wantErr)
				if err == nil || !strings.Contains(err.Error(), at) {
					t.Errorf("%s at offset %d among %q: error %v, want one containing %q", tc.name, offset, filler, err, at)
				}
				if json.Valid([]byte(body)) {
					t.Errorf("%q is JSON", body)
				}
			}
		}
	}
}

// FuzzReduce checks reduce against fastjson and encoding/json on any text:
// it takes no text that fastjson.Validate refuses, and refuses none that
// is JSON; the text it gives parses to the projection and decision-cache
// key that the whole text parses to.
func FuzzReduce(f *testing.F) {
	for _, seed := range []string{
		`{"request":{"operation":"CREATE","object":{"metadata":{"annotations":{"a":"1","b":[{"c":"\""}]}}}}}`,
		`{"request":{"oper\u0061tion":"x","operation":1e5,"userInfo":{"groups":["a"]},"oldObject":null}}`,
		`[1,-2.5e-3,true,false,null,"\\\/\b\f\n\r\t\u00FF"]`, `{"a":NaN}`, `{"a":"\x"}`, "\"\x01\"", ` {} `, `{"a":1,}`,
	} {
		f.Add([]byte(seed))
	}
	tree := reduceTree()
	f.Fuzz(func(t *testing.T, body []byte) {
		reduced, err := reduce(nil, body, tree)
		if err != nil {
			// fastjson.Validate lets a control character before an escape
			// pass; encoding/json, as JSON itself, does not.
			if json.Valid(body) {
				t.Fatalf("reduce refuses JSON: %v", err)
			}
			return
		}
		if err := fastjson.ValidateBytes(body); err != nil {
			t.Fatalf("reduce takes what fastjson.Validate refuses: %v", err)
		}
		var whole, part fastjson.Parser
		wv, werr := whole.ParseBytes(body)
		pv, perr := part.ParseBytes(reduced)
		if werr != nil {
			// Deeper than fastjson parses: the part may still parse.
			return
		}
		if perr != nil {
			t.Fatalf("the whole text parses, its reduction %s does not: %v", reduced, perr)
		}
		if w, p := project(wv, tree).String(), project(pv, tree).String(); w != p {
			t.Fatalf("projection of the reduction %s\nwant %s", p, w)
		}
		if w, p := appendKey(nil, wv, tree), appendKey(nil, pv, tree); !bytes.Equal(w, p) {
			t.Fatalf("key of the reduction %q\nwant %q", p, w)
		}
	})
}
