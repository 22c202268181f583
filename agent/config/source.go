package config

// ConfigFile is the wg-quick file this Spec's tunnel came from
// (wireguard.configFile, or its file of a configFiles pool); "" for
// structured options. A path, never the file's content.
func (s *Spec) ConfigFile() string {
	if s.fromFile == nil {
		return ""
	}
	return s.fromFile.path
}
