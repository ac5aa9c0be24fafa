package authz

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestIdentities(t *testing.T) {
	uris := func(raw ...string) []*url.URL {
		var us []*url.URL
		for _, r := range raw {
			u, err := url.Parse(r)
			if err != nil {
				t.Fatal(err)
			}
			us = append(us, u)
		}
		return us
	}
	tests := map[string]struct {
		cert *x509.Certificate
		want []string
	}{
		"URI SANs, then DNS SANs, then the CN": {
			cert: &x509.Certificate{URIs: uris(eastID, westID), DNSNames: []string{"east.example.org", "x"}, Subject: pkix.Name{CommonName: "east"}},
			want: []string{eastID, westID, "dns:east.example.org", "dns:x", "cn:east"},
		},
		"a DNS SAN that spells a SPIFFE ID": {cert: &x509.Certificate{DNSNames: []string{eastID}}, want: []string{"dns:" + eastID}},
		"a CN that spells a SPIFFE ID":      {cert: &x509.Certificate{Subject: pkix.Name{CommonName: eastID}}, want: []string{"cn:" + eastID}},
		"a URI that begins with a prefix":   {cert: &x509.Certificate{URIs: uris("dns:east.example.org")}, want: []string{"uri:dns:east.example.org"}},
		"each once": {
			cert: &x509.Certificate{URIs: uris(eastID, eastID), DNSNames: []string{"a", "b", "a"}},
			want: []string{eastID, "dns:a", "dns:b"},
		},
		"nothing names no one": {cert: &x509.Certificate{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Identities(tc.cert); !slices.Equal(got, tc.want) {
				t.Errorf("Identities = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseIdentity(t *testing.T) {
	tests := map[string]struct {
		written string
		want    string
		// wantErr is part of the error; empty means it parses.
		wantErr string
	}{
		"a SPIFFE ID":                    {written: eastID, want: eastID},
		"a SPIFFE ID written uri:":       {written: "uri:" + eastID, want: eastID},
		"a scheme in upper case":         {written: "SPIFFE://example.org/x", want: "spiffe://example.org/x"},
		"a DNS SAN":                      {written: "dns:east.example.org", want: "dns:east.example.org"},
		"a common name":                  {written: "cn:East Cluster", want: "cn:East Cluster"},
		"a URI whose scheme is a kind":   {written: "uri:dns:east.example.org", want: "uri:dns:east.example.org"},
		"a bare host name":               {written: "east.example.org", wantErr: "not an absolute URI: an identity without dns: or cn: names a URI SAN"},
		"a bare host name is told how":   {written: "east.example.org", wantErr: "write dns:east.example.org for a DNS SAN or cn:east.example.org for a common name"},
		"a prefix without a value":       {written: "dns:", wantErr: "identity is empty"},
		"nothing":                        {written: "", wantErr: "identity is empty"},
		"a prefix this file lacks (URI)": {written: "foo:bar", want: "foo:bar"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseIdentity(tc.written)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("parseIdentity(%q) = %q, %v; want an error saying %q", tc.written, got, err, tc.wantErr)
				}
			case err != nil || got != tc.want:
				t.Errorf("parseIdentity(%q) = %q, %v; want %q", tc.written, got, err, tc.want)
			}
		})
	}
}
