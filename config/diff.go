package config

import "reflect"

// Changed returns the keys whose values differ between a and b, in the order of the
// fields of Config: "sync.timeout", "server.tls.certFile". A list or a map is one key,
// changed when any of its elements is: "resources", "contexts.aliases".
func Changed(a, b *Config) []string {
	var keys []string
	for i := range leaves {
		l := &leaves[i]
		if !reflect.DeepEqual(l.value(a), l.value(b)) {
			keys = append(keys, l.path)
		}
	}
	return keys
}
