# Packer >= 1.7 loads builders as plugins: `packer init .` installs this one,
# then `packer build .` reads both files. Packer 1.6.6 (Debian 12's) has the
# builder built in and does not know this block: give it agent.pkr.hcl alone.
packer {
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = ">= 1.2.0"
    }
  }
}
