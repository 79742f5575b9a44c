package config_test

import (
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/fleetwatch/fleetwatch/config"
)

// FuzzLoad checks that Load never panics, that every problem it reports matches
// ErrInvalid, and that what it accepts is valid and survives a trip through String.
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"testdata/full.yaml", "testdata/full.golden.yaml", "testdata/invalid.yaml", "testdata/example.yaml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	for _, seed := range []string{
		"",
		"---\n",
		"~\n",
		"[]\n",
		"resources:\n  - &a {name: pods, namespaces: &n [a, b]}\n  - <<: *a\n    name: nodes\n  - {name: x, namespaces: *n}\n",
		"sync: &s {<<: *s}\n",
		"contexts:\n  aliases: {a: b, 'c.d': E, ~: x}\n",
		"server: {address: '[::1]:1', tls: {certFile: a}}\n",
		"kubeconfig: [~/a, ../b, '']\nsnapshot: {path: ~}\n",
		"log: {verbosity: 0x10, format: !!str json}\n",
		"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n",
		"sync:\n  timeout: 1m\n  timeout: 2m\n",
		"resources:\n- name: pods\n  labelSelector: 'a in (b'\n  fieldSelector: '=='\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		// Relative paths from the file and from the defaults mean the same when the file
		// is in the working directory, so the output of String loads back equal.
		t.Chdir(t.TempDir())
		if err := os.WriteFile("config.yaml", []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(config.LoadOptions{File: "config.yaml", LookupEnv: lookupIn(nil)})
		if err != nil {
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Load: %v does not match ErrInvalid", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load accepted an invalid config: %v", err)
		}
		text := c.String()
		if err := os.WriteFile("again.yaml", []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := config.Load(config.LoadOptions{File: "again.yaml", LookupEnv: lookupIn(nil)})
		if err != nil {
			t.Fatalf("String() of an accepted config does not load: %v\n%s", err, text)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip through\n%s\ngot  %+v\nwant %+v", text, *again, *c)
		}
	})
}
