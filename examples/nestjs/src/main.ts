import 'reflect-metadata';
import { Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { Leasehold } from 'leasehold';
import { LeaseholdModule, OncePerSlot, currentSlot } from 'leasehold/nestjs';

@Injectable()
class Reports {
  constructor(@Inject(Leasehold) private readonly leasehold: Leasehold) {}

  @Cron('* * * * * *')
  @OncePerSlot('report')
  report(): void {
    const { slot, token } = currentSlot(); // fence writes with token; stop when signal aborts
    console.log(`slot ${slot} token ${token} (holder ${this.leasehold.holder})`);
  }
}

@Module({
  imports: [ScheduleModule.forRoot(), LeaseholdModule.forRoot({ store: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', ttl: '5s' })],
  providers: [Reports],
})
class AppModule {}

const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
