package cluster

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// plainSerializer is the serializer of the clients that probe a cluster and read its
// identity, which send no body and decode no more than an error's Status: a discovery
// client's, made once. discovery.NewDiscoveryClientForConfig makes a decoder of the
// whole scheme for every client, which in a fleet of 1,000 clusters was a tenth of a
// second of CPU for each kind of client.
var plainSerializer = sync.OnceValue(func() runtime.NegotiatedSerializer {
	return serializer.NegotiatedSerializerWrapper(runtime.SerializerInfo{Serializer: runtime.NoopEncoder{Decoder: scheme.Codecs.UniversalDecoder()}})
})

// plainClient returns a REST client of the paths of cfg's server, such as a discovery
// client has, for requests that bound their time with their context.
func plainClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath, c.GroupVersion = "", nil
	c.NegotiatedSerializer = plainSerializer()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.UnversionedRESTClientFor(c)
}
