module github.com/rbdfence/rbdfence

go 1.26.0

require (
	github.com/OpenNebula/one/src/oca/go/src/goca v0.0.0-20230221172108-c4ab0456bf45
	github.com/ceph/go-ceph v0.37.0
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.74.0
	github.com/sirupsen/logrus v1.10.2
	github.com/spf13/pflag v1.1.0
	golang.org/x/sys v0.49.0
	gopkg.in/yaml.v3 v3.0.1
	libvirt.org/go/libvirtxml v1.12008.0
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.1 // indirect
	github.com/kolo/xmlrpc v0.0.0-20190717152603-07c4ee3fd181 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pandatix/go-abnf v0.5.5 // indirect
	golang.org/x/text v0.44.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
