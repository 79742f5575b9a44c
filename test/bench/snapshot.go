package main

import (
	"time"

	bolt "go.etcd.io/bbolt"
)

// encodedSizes sums the encoded objects of a snapshot file by resource key, walking the
// bucket tree that package persist documents (clusters/<cluster>/resources/<key>/objects).
// persist.Inspect reports the bbolt pages the objects take; this is the payload in them.
func encodedSizes(path string) (map[string]resourceSize, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	out := map[string]resourceSize{}
	err = db.View(func(tx *bolt.Tx) error {
		clusters := tx.Bucket([]byte("clusters"))
		if clusters == nil {
			return nil
		}
		return clusters.ForEachBucket(func(name []byte) error {
			resources := clusters.Bucket(name).Bucket([]byte("resources"))
			if resources == nil {
				return nil
			}
			return resources.ForEachBucket(func(key []byte) error {
				objects := resources.Bucket(key).Bucket([]byte("objects"))
				if objects == nil {
					return nil
				}
				s := out[string(key)]
				err := objects.ForEach(func(_, v []byte) error {
					s.Objects++
					s.Bytes += int64(len(v))
					return nil
				})
				out[string(key)] = s
				return err
			})
		})
	})
	return out, err
}
