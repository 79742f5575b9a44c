package main

import (
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/persist"
)

// encodedSizes sums the encoded objects of a snapshot file by resource key, walking the
// bucket tree that package persist documents (clusters/<cluster>/resources/<key>/objects,
// without the objects' lists of changes, whose keys end with a 0 byte).
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
				err := objects.ForEach(func(k, v []byte) error {
					if len(k) > 0 && k[len(k)-1] == 0 {
						return nil // an object's list of changes, with the change log on
					}
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

// resumeProbe is the apiserver's answer to a watch from a resourceVersion of the
// snapshot.
type resumeProbe struct {
	Cluster         string `json:"cluster"`
	Resource        string `json:"resource"`
	ResourceVersion string `json:"resourceVersion"`
	Resumes         bool   `json:"resumes"`
	// Answer is the error, such as the 410 "too old resource version: 8743 (8745)" that
	// names the oldest version the apiserver's watch cache can still replay from.
	Answer string `json:"answer,omitempty"`
}

func (p resumeProbe) String() string {
	if p.Resumes {
		return fmt.Sprintf("%s %s from %s: resumes", p.Cluster, p.Resource, p.ResourceVersion)
	}
	return fmt.Sprintf("%s %s from %s: %s", p.Cluster, p.Resource, p.ResourceVersion, p.Answer)
}

// probeResume asks, for each cluster and resource of the snapshot at path, whether its
// apiserver still lets a watch resume from the stored resourceVersion. It runs before
// the catch-up restart, whose relist, if any, it explains: a resume that the apiserver
// refuses (410 Gone) makes every informer relist, client-go's as well as fleetwatch's.
func (d *driver) probeResume(ctx context.Context, path string) ([]resumeProbe, error) {
	info, err := inspect(path)
	if err != nil {
		return nil, err
	}
	var out []resumeProbe
	for _, ci := range info.Clusters {
		c := d.env.Cluster(ci.Name)
		if c == nil {
			continue
		}
		for _, ri := range ci.Resources {
			gvr, ok := benchGVRByKey(ri.Resource)
			if !ok {
				continue
			}
			answer := watchFrom(ctx, c, gvr, ri.ResourceVersion)
			out = append(out, resumeProbe{Cluster: ci.Name, Resource: gvr.Resource, ResourceVersion: ri.ResourceVersion,
				Resumes: answer == "", Answer: answer})
		}
	}
	return out, nil
}

// watchFrom opens a watch from rv and returns the error that its apiserver answers, or
// "" if the watch starts.
func watchFrom(ctx context.Context, c *testenv.Cluster, gvr schema.GroupVersionResource, rv string) string {
	timeout := int64(1)
	w, err := c.Dynamic().Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
	if err != nil {
		return err.Error()
	}
	defer w.Stop()
	// The first event tells: an error, or anything else (the watch started). A watch
	// that ends without one (its timeout, with no change) started too.
	if e, ok := <-w.ResultChan(); ok && e.Type == watch.Error {
		return apierrors.FromObject(e.Object).Error()
	}
	return ""
}

func benchGVRByKey(k persist.ResourceKey) (schema.GroupVersionResource, bool) {
	for _, gvr := range benchGVRs {
		if persist.ResourceKeyFor(gvr) == k {
			return gvr, true
		}
	}
	return schema.GroupVersionResource{}, false
}
